// core/kernels/cpu/optim.cpp — fused optimizer updates: one pass over param, grad and state per
// step instead of the five or six elementwise ops the textbook formulas need. Formulas follow
// torch.optim (1.13) exactly, so a run can be compared with PyTorch step for step.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <atomic>
#include <cmath>

namespace tandem::cpu {

// g ← g + wd·p;  b ← g (first step) or μ·b + (1 − τ)·g;  d ← g + μ·b (nesterov) or b;  p ← p − lr·d
void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdParams& s) {
  dispatch_float(param.dtype(), "sgd_step", [&]<typename T>() {
    T* pp = param.data<T>();
    const T* pg = grad.data<T>();
    T* pb = s.momentum != 0 ? buf.data<T>() : nullptr;
    const T wd = T(s.weight_decay), mu = T(s.momentum), damp = T(1 - s.dampening), lr = T(s.lr);
    detail::parallel_for(0, param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      const int64_t n = hi - lo;
      ArrayMap<T> p(pp + lo, n);
      const ConstArrayMap<T> g0(pg + lo, n);
      // Each statement is one loop Eigen fuses element by element, with no temporary array (g
      // stays an expression; p[i] is read before it is written, so p may appear on both sides).
      auto update = [&](const auto& g) {
        if (pb == nullptr) {
          p -= lr * g;
          return;
        }
        ArrayMap<T> b(pb + lo, n);
        if (s.first_step)
          b = g;
        else
          b = mu * b + damp * g;
        if (s.nesterov)
          p -= lr * (g + mu * b);
        else
          p -= lr * b;
      };
      if (s.weight_decay != 0)
        update(g0 + wd * p);
      else
        update(g0);
    });
  });
}

// Adam:  g ← g + wd·p (AdamW instead: p ← p·(1 − lr·wd));  m ← β1·m + (1 − β1)·g;
//        v ← β2·v + (1 − β2)·g²;  p ← p − lr/(1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + ε)
void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               const AdamParams& a) {
  dispatch_float(param.dtype(), "adam_step", [&]<typename T>() {
    T* pp = param.data<T>();
    const T* pg = grad.data<T>();
    T* pm = exp_avg.data<T>();
    T* pv = exp_avg_sq.data<T>();
    const double bc1 = 1 - std::pow(a.beta1, double(a.step)),
                 bc2 = 1 - std::pow(a.beta2, double(a.step));
    const T step_size = T(a.lr / bc1), bc2_sqrt = T(std::sqrt(bc2));
    detail::parallel_for(0, param.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      const int64_t n = hi - lo;
      ArrayMap<T> p(pp + lo, n), m(pm + lo, n), v(pv + lo, n);
      const ConstArrayMap<T> g0(pg + lo, n);
      if (a.decoupled_weight_decay && a.weight_decay != 0) p *= T(1 - a.lr * a.weight_decay);
      if (!a.decoupled_weight_decay && a.weight_decay != 0) {
        const Array1<T> g = g0 + T(a.weight_decay) * p;
        m = T(a.beta1) * m + T(1 - a.beta1) * g;
        v = T(a.beta2) * v + T(1 - a.beta2) * g * g;
      } else {
        m = T(a.beta1) * m + T(1 - a.beta1) * g0;
        v = T(a.beta2) * v + T(1 - a.beta2) * g0 * g0;
      }
      p -= step_size * m / (v.unaryExpr(ExactSqrt{}) / bc2_sqrt + T(a.eps));
    });
  });
}

// GradScaler: g ← g·(1/scale) in one pass that also notices inf and NaN (a product with them
// stays non-finite, so checking the result is checking the input). The reciprocal is computed in
// double and rounded to float32, as PyTorch's GradScaler does.
void unscale_grad(Tensor& grad, const Tensor& scale, Tensor& found_inf) {
  const float inv_scale = float(1.0 / double(*scale.data<float>()));
  dispatch_float(grad.dtype(), "unscale_grad", [&]<typename T>() {
    T* pg = grad.data<T>();
    std::atomic<bool> any{false};
    detail::parallel_for(0, grad.numel(), kGrain, [&](int64_t lo, int64_t hi) {
      ArrayMap<T> g(pg + lo, hi - lo);
      g *= T(inv_scale);
      if (!g.isFinite().all()) any.store(true, std::memory_order_relaxed);
    });
    if (any.load()) *found_inf.data<float>() = 1.0f;
  });
}

void amp_update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& skipped,
                      const Tensor& found_inf, const AmpScaleParams& p) {
  float& s = *scale.data<float>();
  int64_t& tracker = *growth_tracker.data<int64_t>();
  if (*found_inf.data<float>() != 0) {
    s *= float(p.backoff_factor);
    tracker = 0;
    ++*skipped.data<int64_t>();
  } else if (++tracker == p.growth_interval) {
    const float grown = s * float(p.growth_factor);
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  }
}

}  // namespace tandem::cpu
