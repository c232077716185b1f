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
// One element of the update, shared by the one-tensor and the many-tensor kernels.
template <typename T>
__device__ __forceinline__ void adam_update(T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                            int64_t i, const AdamScalars<T>& s) {
  T p = param[i], g = grad[i];
  if (s.decoupled_decay) p = p * s.decay_factor;
  if (s.coupled_decay) g = g + s.weight_decay * p;
  const T m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
  const T v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * g * g;
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  param[i] = p - s.step_size * m / (d_sqrt(v) / s.bc2_sqrt + s.eps);
}

template <typename T>
__global__ void adam_kernel(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n,
                            AdamScalars<T> s) {
  TD_GRID_STRIDE_LOOP(i, n) { adam_update(param, grad, exp_avg, exp_avg_sq, i, s); }
}

// Many tensors in one launch, as PyTorch's multi_tensor_apply: the kernel's argument carries up to
// kSlots tensors' pointers and where each one's blocks start; a block finds its tensor and updates
// one chunk of it with adam_kernel's arithmetic. (A kernel argument may be 4 KB: 48 tensors need
// 2.3 KB.) One launch instead of 48 matters for models of many small tensors, a GPT's biases
// and LayerNorms, where each launch would do almost no work.
constexpr int kSlots = 48;
constexpr int64_t kChunk = 4 * kThreads;  // elements per block

template <typename T>
struct AdamBatch {
  T* param[kSlots];
  const T* grad[kSlots];
  T* exp_avg[kSlots];
  T* exp_avg_sq[kSlots];
  int64_t numel[kSlots];
  int64_t first_block[kSlots + 1];  // tensor i owns blocks [first_block[i], first_block[i + 1])
  int count;
};

template <typename T>
__global__ void adam_many_kernel(AdamBatch<T> b, AdamScalars<T> s) {
  int t = 0;
  while (t + 1 < b.count && int64_t(blockIdx.x) >= b.first_block[t + 1]) ++t;
  const int64_t lo = (int64_t(blockIdx.x) - b.first_block[t]) * kChunk;
  const int64_t hi = min(lo + kChunk, b.numel[t]);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    adam_update(b.param[t], b.grad[t], b.exp_avg[t], b.exp_avg_sq[t], i, s);
}

// adam_many_kernel with the step count and the skip flag on the device. The bias corrections
// come from each tensor's step + 1, in double as the host computes them (the device's pow may
// round its last bit differently); advance_steps_kernel, launched after it on the same stream,
// then adds the 1, so that no block reads a count another block has already changed.
struct AdamDeviceScalars {
  double lr, beta1, beta2;
};

struct StepPointers {
  float* step[kSlots];  // tensor i's count
};

template <typename T>
__global__ void adam_many_unless_kernel(AdamBatch<T> b, StepPointers steps, AdamScalars<T> s,
                                        AdamDeviceScalars d, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0) return;
  int t = 0;
  while (t + 1 < b.count && int64_t(blockIdx.x) >= b.first_block[t + 1]) ++t;
  const double step = double(*steps.step[t]) + 1;
  s.step_size = T(d.lr / (1 - pow(d.beta1, step)));
  s.bc2_sqrt = T(sqrt(1 - pow(d.beta2, step)));
  const int64_t lo = (int64_t(blockIdx.x) - b.first_block[t]) * kChunk;
  const int64_t hi = min(lo + kChunk, b.numel[t]);
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    adam_update(b.param[t], b.grad[t], b.exp_avg[t], b.exp_avg_sq[t], i, s);
}

__global__ void advance_steps_kernel(StepPointers p, int count, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0) return;
  if (int(threadIdx.x) < count) *p.step[threadIdx.x] += 1;
}

// GradScaler: g ← g·(1/scale), and *found_inf = 1 if any result is inf or NaN (a product with
// them stays non-finite). Every thread that finds one writes the same value: no atomics needed.
// The scale is read on the device (no host sync); its reciprocal rounded to float32 as PyTorch.
template <typename T>
__global__ void unscale_kernel(T* grad, int64_t n, const float* scale, float* found_inf) {
  const T inv_scale = T(float(1.0 / double(*scale)));
  TD_GRID_STRIDE_LOOP(i, n) {
    const T g = grad[i] * inv_scale;
    grad[i] = g;
    if (!isfinite(g)) *found_inf = 1.0f;
  }
}

// GradScaler's update, one thread: the CPU's amp_update_scale.
__global__ void amp_update_scale_kernel(float* scale, int64_t* tracker, int64_t* skipped,
                                        const float* found_inf, AmpScaleParams p) {
  if (*found_inf != 0) {
    *scale = *scale * float(p.backoff_factor);
    *tracker = 0;
    *skipped += 1;
  } else if (++*tracker == p.growth_interval) {
    const float grown = *scale * float(p.growth_factor);
    if (isfinite(grown)) *scale = grown;
    *tracker = 0;
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

namespace {

// The scalars in T; the bias corrections in double first, as the CPU computes them.
template <typename T>
AdamScalars<T> adam_scalars(const AdamParams& a) {
  const double bc1 = 1 - std::pow(a.beta1, double(a.step)),
               bc2 = 1 - std::pow(a.beta2, double(a.step));
  const bool decay = a.weight_decay != 0;
  return {.beta1 = T(a.beta1),
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
}

}  // namespace

void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
               const AdamParams& a) {
  const int64_t n = param.numel();
  if (n == 0) return;
  DeviceGuard guard(param.device());
  dispatch_float(param.dtype(), "adam_step", [&]<typename T>() {
    adam_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), n,
        adam_scalars<T>(a));
    TD_CUDA_CHECK_LAUNCH();
  });
}

namespace {

// Fills `b` (and `steps`, if given) with the next run of up to kSlots tensors of one dtype from
// slots[i...], advancing i (empty ones only when `steps` is given); the optimizer passes them
// grouped by dtype. Returns the blocks the launch needs (0 if every tensor is empty).
template <typename T>
int64_t fill_batch(std::span<const AdamSlot> slots, size_t& i, AdamBatch<T>& b,
                   StepPointers* steps) {
  const DType dtype = slots[i].param->dtype();
  int64_t blocks = 0;
  for (; i < slots.size() && b.count < kSlots && slots[i].param->dtype() == dtype; ++i) {
    const AdamSlot& s = slots[i];
    const int64_t n = s.param->numel();
    // An empty tensor needs no block, but its step count still advances (as on the CPU, and as
    // PyTorch counts a step for every parameter with a gradient): keep it when counts are kept.
    if (n == 0 && steps == nullptr) continue;
    const int k = b.count++;
    b.param[k] = s.param->data<T>();
    b.grad[k] = s.grad->data<T>();
    b.exp_avg[k] = s.exp_avg->data<T>();
    b.exp_avg_sq[k] = s.exp_avg_sq->data<T>();
    b.numel[k] = n;
    b.first_block[k] = blocks;
    if (steps != nullptr) steps->step[k] = s.step->data<float>();
    blocks += (n + kChunk - 1) / kChunk;
  }
  b.first_block[b.count] = blocks;
  return blocks;
}

}  // namespace

void adam_step_many(std::span<const AdamSlot> slots, const AdamParams& a) {
  if (slots.empty()) return;
  DeviceGuard guard(slots.front().param->device());
  size_t i = 0;
  while (i < slots.size()) {
    dispatch_float(slots[i].param->dtype(), "adam_step_many", [&]<typename T>() {
      AdamBatch<T> b{};
      const int64_t blocks = fill_batch(slots, i, b, nullptr);
      if (b.count == 0) return;
      adam_many_kernel<T><<<unsigned(blocks), kThreads, 0, stream()>>>(b, adam_scalars<T>(a));
      TD_CUDA_CHECK_LAUNCH();
    });
  }
}

void adam_step_many_unless(std::span<const AdamSlot> slots, const AdamParams& a,
                           const Tensor& found_inf) {
  if (slots.empty()) return;
  DeviceGuard guard(slots.front().param->device());
  const float* flag = found_inf.defined() ? found_inf.data<float>() : nullptr;
  size_t i = 0;
  while (i < slots.size()) {
    dispatch_float(slots[i].param->dtype(), "adam_step_many_unless", [&]<typename T>() {
      AdamBatch<T> b{};
      StepPointers steps{};
      const int64_t blocks = fill_batch(slots, i, b, &steps);
      if (b.count == 0) return;
      if (blocks > 0) {  // a batch of empty tensors only advances their counts
        adam_many_unless_kernel<T><<<unsigned(blocks), kThreads, 0, stream()>>>(
            b, steps, adam_scalars<T>(a), AdamDeviceScalars{a.lr, a.beta1, a.beta2}, flag);
        TD_CUDA_CHECK_LAUNCH();
      }
      advance_steps_kernel<<<1, kSlots, 0, stream()>>>(steps, b.count, flag);
      TD_CUDA_CHECK_LAUNCH();
    });
  }
}

void unscale_grad(Tensor& grad, const Tensor& scale, Tensor& found_inf) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  DeviceGuard guard(grad.device());
  dispatch_float(grad.dtype(), "unscale_grad", [&]<typename T>() {
    unscale_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        grad.data<T>(), n, scale.data<float>(), found_inf.data<float>());
    TD_CUDA_CHECK_LAUNCH();
  });
}

void amp_update_scale(Tensor& scale, Tensor& growth_tracker, Tensor& skipped,
                      const Tensor& found_inf, const AmpScaleParams& p) {
  DeviceGuard guard(scale.device());
  amp_update_scale_kernel<<<1, 1, 0, stream()>>>(
      scale.data<float>(), growth_tracker.data<int64_t>(), skipped.data<int64_t>(),
      found_inf.data<float>(), p);
  TD_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
