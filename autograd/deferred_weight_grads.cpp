// autograd/deferred_weight_grads.cpp — grouping the deferred parts by weight, one product each.
#include <tandem/autograd/deferred_weight_grads.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/layout.h>
#include <algorithm>
#include <iterator>
#include <utility>

namespace tandem::autograd {

void DeferredWeightGrads::append(DeferredWeightGrads&& other) {
  parts_.insert(parts_.end(), std::make_move_iterator(other.parts_.begin()),
                std::make_move_iterator(other.parts_.end()));
  callbacks_.insert(callbacks_.end(), std::make_move_iterator(other.callbacks_.begin()),
                    std::make_move_iterator(other.callbacks_.end()));
  other.parts_.clear();
  other.callbacks_.clear();
}

void DeferredWeightGrads::sort_by_run_order() {
  std::stable_sort(parts_.begin(), parts_.end(),
                   [](const Part& a, const Part& b) { return a.sequence_nr > b.sequence_nr; });
}

void DeferredWeightGrads::run() {
  std::vector<Part> parts = std::exchange(parts_, {});
  // The weights in the order they were first deferred; each with its parts in order.
  struct Weight {
    TensorImpl* leaf;
    WeightGradFn fn;
    std::vector<size_t> parts;
  };
  std::vector<Weight> weights;
  for (size_t i = 0; i < parts.size(); ++i) {
    auto it = std::find_if(weights.begin(), weights.end(), [&](const Weight& w) {
      return w.leaf == &parts[i].leaf.impl() && w.fn == parts[i].fn;
    });
    if (it == weights.end())
      it = weights.insert(weights.end(), {&parts[i].leaf.impl(), parts[i].fn, {}});
    it->parts.push_back(i);
  }
  size_t done = 0;
  try {
    detail::run_as_backward_tail(
        [&] {
          NoGradGuard no_grad;  // as in backward: what is computed here is not part of any graph
          while (done < weights.size()) {
            const Weight& w = weights[done];
            // fn(cat(dy_i), cat(x_i)) = Σ_i fn(dy_i, x_i): one product over all the rows.
            std::vector<Tensor> dy, x;
            for (size_t i : w.parts) {
              dy.push_back(parts[i].dy);
              x.push_back(parts[i].operand);
            }
            const Tensor dys = dy.size() == 1 ? tandem::detail::contiguous(dy[0]) : cat(dy, 0);
            const Tensor xs = x.size() == 1 ? tandem::detail::contiguous(x[0]) : cat(x, 0);
            dy.clear();
            x.clear();
            const Tensor leaf = parts[w.parts[0]].leaf;
            Tensor grad = detail::leaf_hooks(leaf, w.fn(dys, xs));  // a throw here adds nothing
            for (size_t i : w.parts) parts[i] = Part{};  // this weight's rows are free now
            ++done;  // added below: a post-accumulate hook that throws must not see it again
            detail::add_to_grad(leaf, std::move(grad));
          }
        },
        callbacks_);
  } catch (...) {
    // What was not accumulated stays, and so do the callbacks (run_as_backward_tail left them).
    std::vector<Part> left;
    for (size_t k = done; k < weights.size(); ++k)
      for (size_t i : weights[k].parts) left.push_back(std::move(parts[i]));
    parts_.insert(parts_.begin(), std::make_move_iterator(left.begin()),
                  std::make_move_iterator(left.end()));
    throw;
  }
}

}  // namespace tandem::autograd
