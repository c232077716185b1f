// autograd/weight_grad_deferral.cpp — holding (dy, x) per weight, and one product per weight when
// flushed.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/weight_grad_deferral.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>

namespace tandem {
namespace {
thread_local std::shared_ptr<WeightGradDeferral> t_deferral;
}

bool WeightGradDeferral::defer(const Tensor& weight, const Tensor& dy, const Tensor& x) {
  if (!weight.is_leaf() || !weight.requires_grad()) return false;
  std::lock_guard lk(mutex_);
  auto it = std::find_if(weights_.begin(), weights_.end(),
                         [&](const Weight& w) { return w.weight.impl_ptr() == weight.impl_ptr(); });
  if (it == weights_.end()) it = weights_.insert(weights_.end(), Weight{weight, {}, {}});
  it->dy.push_back(dy);
  it->x.push_back(x);
  return true;
}

void WeightGradDeferral::flush() {
  std::vector<Weight> weights;
  {
    std::lock_guard lk(mutex_);
    weights = std::exchange(weights_, {});
  }
  NoGradGuard no_grad;  // as in backward: what is computed here is not part of any graph
  for (size_t done = 0; done < weights.size(); ++done) {
    Weight& w = weights[done];
    try {
      // dW = Σ_i dy_iᵀ·x_i = [dy_0; dy_1; …]ᵀ·[x_0; x_1; …]: one product over all the rows.
      const Tensor dy = w.dy.size() == 1 ? detail::contiguous(w.dy[0]) : cat(w.dy, 0);
      const Tensor x = w.x.size() == 1 ? detail::contiguous(w.x[0]) : cat(w.x, 0);
      Tensor dw = empty(w.weight.shape(), dy.options());
      kernels(dy.device()).gemm(dy, x, dw, /*trans_a=*/true, /*trans_b=*/false);
      autograd::detail::accumulate_grad(w.weight, std::move(dw));
    } catch (...) {  // a hook threw, memory ran out: what was not accumulated stays pending
      std::lock_guard lk(mutex_);
      weights_.insert(weights_.begin(), std::make_move_iterator(weights.begin() + done),
                      std::make_move_iterator(weights.end()));
      throw;
    }
    w.dy.clear();  // this weight's rows are free now, not at the end of the flush
    w.x.clear();
  }
}

size_t WeightGradDeferral::pending() const {
  std::lock_guard lk(mutex_);
  size_t n = 0;
  for (const Weight& w : weights_) n += w.dy.size();
  return n;
}

std::shared_ptr<WeightGradDeferral> WeightGradDeferral::current() { return t_deferral; }
void WeightGradDeferral::set_current(std::shared_ptr<WeightGradDeferral> deferral) {
  t_deferral = std::move(deferral);
}

WeightGradDeferralGuard::WeightGradDeferralGuard(std::shared_ptr<WeightGradDeferral> deferral)
    : previous_(std::exchange(t_deferral, std::move(deferral))) {}
WeightGradDeferralGuard::~WeightGradDeferralGuard() { t_deferral = std::move(previous_); }

}  // namespace tandem
