// core/kernels/params.h — parameter structs of the layer and optimizer kernels, shared by the CPU
// and CUDA backends and the ops that call them.
#pragma once

#include <tandem/core/dtype.h>
#include <tandem/core/generator.h>
#include <cstdint>

namespace tandem {

/// 2-D convolution over NCHW; weight [C_out, C_in / groups, kH, kW].
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

/// 2-D pooling over NCHW (PyTorch's defaults: stride = kernel, no padding, pad counted in
/// averages).
struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling only
};

/// Softmax cross-entropy / NLL over class indices.
struct ClassLossParams {
  int64_t ignore_index = -100;   // rows with this target contribute nothing
  double label_smoothing = 0.0;  // ε: target = (1 − ε)·one_hot + ε / C
};

/// Fused scaled-dot-product attention: scores q·kᵀ·scale, plus the mask, −∞ above the diagonal
/// when causal (query i sees keys j <= i: PyTorch's top-left alignment); dropout on the
/// probabilities with rate dropout_p, its keep-mask drawn from `rng` at counter offset +
/// b·batch_stride + i·row_stride + j: by default (strides 0) (b·Tq + i)·Tk + j, the element
/// rand() of shape [B, Tq, Tk] would use. A block of a longer sequence's probabilities gives that
/// sequence's strides (and its first element as the offset), so that it draws the numbers one
/// device draws there (ring attention's blocks, parallel/cp/ring_attention.cpp).
/// `flash` asks CUDA for the tensor-core kernels (cuda/flash_attention.cu), which the op sets
/// only where flash_attention_unsupported() says nothing; the CPU has one fused kernel.
struct AttentionParams {
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  GeneratorState rng;
  int64_t rng_batch_stride = 0, rng_row_stride = 0;  // 0: Tq·Tk and Tk
  bool flash = false;

  int64_t batch_stride(int64_t tq, int64_t tk) const {
    return rng_batch_stride ? rng_batch_stride : tq * tk;
  }
  int64_t row_stride(int64_t tk) const { return rng_row_stride ? rng_row_stride : tk; }
  uint64_t dropout_counter(int64_t batch, int64_t i, int64_t j, int64_t tq, int64_t tk) const {
    return rng.offset + uint64_t(batch * batch_stride(tq, tk) + i * row_stride(tk) + j);
  }
};

/// Why the tensor-core attention kernels cannot take q [B, Tq, d] and v [B, Tk, dv] of `dtype`,
/// or null if they can: they multiply 16-bit tiles (the tensor cores' inputs) 16 columns at a
/// time, so d = dv, and each head dim is a kernel of its own: 32, 64 (GPT-2's) or 128.
inline const char* flash_attention_unsupported(DType dtype, int64_t d, int64_t dv) {
  if (dtype != kBFloat16 && dtype != kFloat16) return "it takes bfloat16 or float16 (autocast)";
  if (d != dv) return "it needs the value's head dim equal to the query's";
  if (d != 32 && d != 64 && d != 128) return "it takes head dims of 32, 64 or 128";
  return nullptr;
}

/// One SGD step: PyTorch's torch.optim.SGD semantics.
struct SgdParams {
  double lr = 0.01, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised to the gradient
};

/// One Adam/AdamW step (bias-corrected moments at step `step` >= 1).
struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;
  bool decoupled_weight_decay = false;  // AdamW
};

/// Training-mode batch normalisation: running = (1 − momentum)·running + momentum·batch (the
/// running variance from the unbiased batch variance, as PyTorch and cuDNN).
struct BatchNormParams {
  double momentum = 0.1, eps = 1e-5;
};

class Tensor;
/// One parameter's tensors in a multi-tensor Adam step (Kernels::adam_step_many); each contiguous.
struct AdamSlot {
  Tensor* param;
  const Tensor* grad;
  Tensor* exp_avg;
  Tensor* exp_avg_sq;
  Tensor* step = nullptr;  // float32 [] on the device: adam_step_many_unless's step count
};

/// GradScaler's rule for its scale (Kernels::amp_update_scale), torch.amp.GradScaler's defaults.
struct AmpScaleParams {
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

}  // namespace tandem
