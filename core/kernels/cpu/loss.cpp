// core/kernels/cpu/loss.cpp — fused softmax cross-entropy and NLL over class indices. The fused
// form never materialises log-probabilities: loss_i = lse_i − (1 − ε)·x[i, t] − ε/C·Σ_j x[i, j],
// and its gradient is softmax − target distribution, computed from the saved log-sum-exp.
// Cross-entropy reads 16-bit logits in place, a row at a time widened into a per-thread buffer,
// and keeps the loss and log-sum-exp in float32: a GPT's logits (tokens × vocabulary, the
// largest activation of its step) are never copied whole to float32, as llm.c's fused classifier
// avoids too.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/runs.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cmath>

namespace tandem::cpu {
namespace {

// The target of row i, range-checked (ignore_index passes through).
int64_t target_of(const int64_t* t, int64_t i, int64_t classes, const ClassLossParams& p,
                  const char* op) {
  const int64_t v = t[i];
  TD_CHECK_INDEX(v == p.ignore_index || (v >= 0 && v < classes), op, ": target value ", v,
                 " at index ", i, " is out of range [0, ", classes, ")");
  return v;
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& target, Tensor& loss, Tensor& lse,
                           const ClassLossParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    target_of(t, i, c, p, "cross_entropy");  // check first, then compute
  dispatch<FloatTypesWith16Bit>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    using C = compute_t<T>;  // loss and lse are C
    const T* x = logits.data<T>();
    C* out = loss.data<C>();
    C* l = lse.data<C>();
    const C eps = C(p.label_smoothing);
    detail::parallel_for(
        0, n, std::max<int64_t>(1, kGrain / std::max<int64_t>(c, 1)), [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i)
            operand<0>(x + i * c, 1, c, [&](const auto& row) {  // a 16-bit row widened once
              const C m = row.maxCoeff();
              l[i] = m + std::log((row - m).exp().sum());
              if (t[i] == p.ignore_index)
                out[i] = C(0);
              else
                out[i] =
                    l[i] - (C(1) - eps) * row[t[i]] - (eps > 0 ? eps / C(c) * row.sum() : C(0));
            });
        });
  });
}

// dlogits[i, j] = dloss_i · (softmax_ij − (1 − ε)·[j = t_i] − ε/C), 0 for ignored rows
void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits, const ClassLossParams& p) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch<FloatTypesWith16Bit>(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
    using C = compute_t<T>;  // lse and dloss are C; dlogits is T, rounded once
    const T* x = logits.data<T>();
    const C* l = lse.data<C>();
    const C* g = dloss.data<C>();
    T* dx = dlogits.data<T>();
    const C eps = C(p.label_smoothing);
    detail::parallel_for(0, n, std::max<int64_t>(1, kGrain / std::max<int64_t>(c, 1)),
                         [&](int64_t lo, int64_t hi) {
                           for (int64_t i = lo; i < hi; ++i) {
                             if (t[i] == p.ignore_index) {
                               std::fill(dx + i * c, dx + (i + 1) * c, T(0));
                               continue;
                             }
                             operand<0>(x + i * c, 1, c, [&](const auto& row) {
                               write_run(dx + i * c, c, [&](auto& out) {
                                 out = ((row - l[i]).exp() - eps / C(c)) * g[i];
                                 out[t[i]] -= (C(1) - eps) * g[i];
                               });
                             });
                           }
                         });
  });
}

// loss_i = −log_probs[i, t_i] (0 for ignored rows)
void nll_loss_forward(const Tensor& log_probs, const Tensor& target, Tensor& loss,
                      const ClassLossParams& p) {
  const int64_t n = log_probs.size(0), c = log_probs.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(log_probs.dtype(), "nll_loss", [&]<typename T>() {
    const T* x = log_probs.data<T>();
    T* out = loss.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = target_of(t, i, c, p, "nll_loss");
      out[i] = k == p.ignore_index ? T(0) : -x[i * c + k];
    }
  });
}

// dlog_probs[i, j] = −dloss_i·[j = t_i]
void nll_loss_backward(const Tensor& target, const Tensor& dloss, Tensor& dlog_probs,
                       const ClassLossParams& p) {
  const int64_t n = dlog_probs.size(0), c = dlog_probs.size(1);
  const int64_t* t = target.data<int64_t>();
  dispatch_float(dlog_probs.dtype(), "nll_loss_backward", [&]<typename T>() {
    T* dx = dlog_probs.data<T>();
    const T* g = dloss.data<T>();
    std::fill(dx, dx + n * c, T(0));
    for (int64_t i = 0; i < n; ++i)
      if (t[i] != p.ignore_index) dx[i * c + t[i]] = -g[i];
  });
}

}  // namespace tandem::cpu
