// core/kernels/cuda/optim.cu — fused optimizer updates, the CUDA side of cpu/optim.cpp: one
// elementwise kernel per step reads param, grad and state once. Formulas and their order of
// operations are the CPU's (torch.optim 1.13); scalars are rounded to T on the host as there.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cmath>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

// SGD's scalars, already in T.
template <typename T>
struct SgdScalars {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool decay, nesterov, first_step;
};

// g ← g + wd·p;  b ← g (first step) or μ·b + (1 − τ)·g;  d ← g + μ·b (nesterov) or b;  p ← p − lr·d
// `buf` is null without momentum.
template <typename T>
__global__ void sgd_kernel(T* param, const T* grad, T* buf, int64_t n, SgdScalars<T> s) {
  TD_GRID_STRIDE_LOOP(i, n) {
    T p = param[i], g = grad[i];
    if (s.decay) g = g + s.weight_decay * p;
    if (buf != nullptr) {
      const T b = s.first_step ? g : s.momentum * buf[i] + s.one_minus_dampening * g;
      buf[i] = b;
      g = s.nesterov ? g + s.momentum * b : b;
    }
    param[i] = p - s.lr * g;
  }
}

// Adam's scalars, already in T; bias corrections were computed in double.
template <typename T>
struct AdamScalars {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor;
  T step_size, bc2_sqrt;  // lr / (1 − β1ᵗ), √(1 − β2ᵗ)
  bool coupled_decay, decoupled_decay;
};

// Adam:  g ← g + wd·p (AdamW instead: p ← p·(1 − lr·wd));  m ← β1·m + (1 − β1)·g;
//        v ← β2·v + (1 − β2)·g²;  p ← p − lr/(1 − β1ᵗ) · m / (√v / √(1 − β2ᵗ) + ε)
template <typename T>
__global__ void adam_kernel(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n,
                            AdamScalars<T> s) {
  TD_GRID_STRIDE_LOOP(i, n) {
    T p = param[i], g = grad[i];
    if (s.decoupled_decay) p = p * s.decay_factor;
    if (s.coupled_decay) g = g + s.weight_decay * p;
    const T m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
    const T v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p - s.step_size * m / (d_sqrt(v) / s.bc2_sqrt + s.eps);
  }
}

// GradScaler: g ← g·(1/scale), and *found_inf = 1 if any result is inf or NaN (a product with
// them stays non-finite). Every thread that finds one writes the same value: no atomics needed.
template <typename T>
__global__ void unscale_kernel(T* grad, int64_t n, T inv_scale, float* found_inf) {
  TD_GRID_STRIDE_LOOP(i, n) {
    const T g = grad[i] * inv_scale;
    grad[i] = g;
    if (!isfinite(g)) *found_inf = 1.0f;
  }
}

}  // namespace

void sgd_step(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdParams& p) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device());
  dispatch_float(param.dtype(), "sgd_step", [&]<typename T>() {
    const SgdScalars<T> s{.lr = T(p.lr),
                          .momentum = T(p.momentum),
                          .one_minus_dampening = T(1 - p.dampening),
                          .weight_decay = T(p.weight_decay),
                          .decay = p.weight_decay != 0,
                          .nesterov = p.nesterov,
                          .first_step = p.first_step};
    T* buf = p.momentum != 0 ? momentum_buffer.data<T>() : nullptr;
    sgd_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream()>>>(param.data<T>(), grad.data<T>(), buf, n, s);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               const AdamParams& a) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device());
  dispatch_float(param.dtype(), "adam_step", [&]<typename T>() {
    const double bc1 = 1 - std::pow(a.beta1, double(a.step)),
                 bc2 = 1 - std::pow(a.beta2, double(a.step));
    const bool decay = a.weight_decay != 0;
    const AdamScalars<T> s{.beta1 = T(a.beta1),
                           .one_minus_beta1 = T(1 - a.beta1),
                           .beta2 = T(a.beta2),
                           .one_minus_beta2 = T(1 - a.beta2),
                           .eps = T(a.eps),
                           .weight_decay = T(a.weight_decay),
                           .decay_factor = T(1 - a.lr * a.weight_decay),
                           .step_size = T(a.lr / bc1),
                           .bc2_sqrt = T(std::sqrt(bc2)),
                           .coupled_decay = decay && !a.decoupled_weight_decay,
                           .decoupled_decay = decay && a.decoupled_weight_decay};
    adam_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), n, s);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void unscale_grad(Tensor& grad, double inv_scale, Tensor& found_inf) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  DeviceGuard guard(grad.device());
  dispatch_float(grad.dtype(), "unscale_grad", [&]<typename T>() {
    unscale_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(grad.data<T>(), n, T(inv_scale),
                                                                found_inf.data<float>());
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
