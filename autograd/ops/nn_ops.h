// autograd/ops/nn_ops.h — the differentiable ops behind nn's layers and losses: convolution,
// pooling and the class losses. nn/ modules call these; they can also be called directly.
#pragma once

#include <tandem/core/kernels/params.h>
#include <tandem/core/tensor.h>
#include <optional>

namespace tandem {

// conv.cpp: x [N, C, H, W], weight [C_out, C / groups, kH, kW], bias [C_out] or undefined
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dParams& params = {});

// pool.cpp. relu_max_pool2d(x, p) is max_pool2d(relu(x), p), values and gradients, in one pass.
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor relu_max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);

// norm.cpp: x [..., *normalized_shape]; weight and bias normalized_shape, or undefined (no
// affine). Statistics in float32 for 16-bit x; under autocast, float32 throughout.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// norm.cpp: batch normalisation with the batch's statistics (training mode) over every dim of
// x [N, C, ...] but C, as one op (cuDNN's kernels on CUDA): y = (x − mean)/√(var + eps)·weight +
// bias with the biased var; weight and bias [C] or undefined. running_mean and running_var [C],
// when defined, move `momentum` of the way to the batch's mean and unbiased var, in place (no
// gradient). Statistics in float32 for 16-bit x; under autocast, float32 throughout.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                  Tensor running_var, double momentum = 0.1, double eps = 1e-5);

// embedding.cpp: weight [V, D], ids int64 of any shape -> [..., D]. padding_idx's row gets no
// gradient (−1: none). An id outside [0, V) is an IndexError naming the id, its position and V.
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);

// attention.cpp: query [..., Tq, D], key [..., Tk, D], value [..., Tk, Dv] -> [..., Tq, Dv].
// Three implementations, as PyTorch's sdpa_kernel backends:
// - Fused: one op that keeps one log-sum-exp per query row for backward, never the Tq×Tk
//   probabilities (FlashAttention's algorithm on the CPU and CUDA, on CUDA cores);
// - Flash: the same op on the tensor cores (CUDA, bfloat16 or float16, head dims 32, 64 or 128 and
//   Dv = D: flash_attention_unsupported() in core/kernels/params.h), rounding the probabilities to
//   16 bits before their products as FlashAttention does;
// - Math: matmul, mask, softmax, dropout, matmul as separate ops (cuBLAS's batched GEMMs on a GPU),
//   which keeps the probabilities. Dropout draws the same counters, so all give the same result;
//   a row whose mask hides every key gives NaN here, zeros in the fused ops.
// Auto takes Flash where it applies once enable_flash_attention(true) was called; else Math on
// CUDA without attn_mask from 2^19 scores (batch·heads·Tq·Tk) while the probabilities take at most
// 1 GiB: there the fused kernel, on CUDA cores, was the slower (docs/gpu-results.md). Else Fused.
enum class AttentionBackend { Auto, Fused, Flash, Math };
/// Whether Auto may take Flash (PyTorch's torch.backends.cuda.enable_flash_sdp). Off until the
/// tensor-core kernels have passed their tests on a GPU: they were written without one
/// (docs/gpu-results.md says what the next GPU session runs). Process-wide.
void enable_flash_attention(bool on);
bool flash_attention_enabled();
struct AttentionOptions {
  Tensor attn_mask;  // bool (true: may attend) or floating (added to the scores), broadcastable to
                     // [..., Tq, Tk]; a constant (no gradient)
  bool causal = false;          // query i sees keys j <= i (PyTorch's is_causal); not with a mask
  double dropout_p = 0;         // dropout on the probabilities, from the device's generator
  std::optional<double> scale;  // default 1/√D
  AttentionBackend backend = AttentionBackend::Auto;
};
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options = {});
/// The same over the heads of one tensor, as one Linear makes q, k and v side by side
/// (FlashAttention's qkvpacked form): qkv [B, T, 3·n_head·D] -> [B, n_head, T, D]. What it adds:
/// the gradient of qkv is written once, where three narrow() views of it would each give back a
/// zero-filled gradient of qkv's size to be added up.
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head,
                                           const AttentionOptions& options = {});

enum class Reduction { Mean, Sum, None };

struct ClassLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// loss.cpp: logits/log_probs [N, C], int64 targets [N]
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const ClassLossOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const ClassLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace tandem
