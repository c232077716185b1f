// core/kernels/kernels.h — every kernel Tandem has, one line each, grouped by the file that
// implements it. A backend fills this table in one place (cpu/registry.cpp, cuda/registry.cpp);
// ops call kernels(device).<name>(...). Outputs are preallocated and contiguous unless a line says
// otherwise; inputs may be any strided view (broadcast inputs arrive as stride-0 views of the
// output's shape). Kernels write their outputs; they never accumulate.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/core/kernels/params.h>
#include <tandem/core/reduce_op.h>
#include <tandem/core/tensor.h>
#include <span>

namespace tandem {

// Gelu is the exact (erf) form; GeluTanh GPT-2's tanh approximation.
enum class UnaryOp : int8_t { Neg, Exp, Log, Sqrt, Abs, Relu, Sigmoid, Tanh, Gelu, GeluTanh };
enum class BinaryOp : int8_t { Add, Sub, Mul, Div, Pow, Maximum, Minimum };
enum class CompareOp : int8_t { Eq, Ne, Lt, Le, Gt, Ge };

const char* name(UnaryOp op);
const char* name(BinaryOp op);
const char* name(CompareOp op);

struct Kernels {
  // copy.{cpp,cu}: movement and conversion
  void (*copy)(const Tensor& src,
               Tensor& dst);                // same shape; any strides, dtypes; dst may be strided
  void (*fill)(Tensor& out, double value);  // out may be strided
  void (*arange)(Tensor& out, double start, double step);
  // random.{cpp,cu}: Philox streams starting at `state` (see core/generator.h)
  void (*uniform)(Tensor& out, double low, double high, GeneratorState state);
  void (*normal)(Tensor& out, double mean, double std, GeneratorState state);
  // elementwise.{cpp,cu}: y = op(x), out = op(a, b), out(bool) = a <op> b, out = cond ? a : b
  void (*unary)(UnaryOp op, const Tensor& x, Tensor& y);
  void (*binary)(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
  void (*compare)(CompareOp op, const Tensor& a, const Tensor& b, Tensor& out);
  void (*where)(const Tensor& cond, const Tensor& a, const Tensor& b, Tensor& out);
  // activation.{cpp,cu}: backward of the activations, from the saved input x or output y
  void (*relu_backward)(const Tensor& x, const Tensor& dy, Tensor& dx);
  void (*sigmoid_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*tanh_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*gelu_backward)(const Tensor& x, const Tensor& dy, Tensor& dx);
  void (*gelu_tanh_backward)(const Tensor& x, const Tensor& dy, Tensor& dx);
  // inplace.{cpp,cu}: optimizer updates of a contiguous `self`
  void (*add_scaled)(Tensor& self, const Tensor& x, double alpha);                // self += α·x
  void (*addcmul)(Tensor& self, const Tensor& a, const Tensor& b, double value);  // self += v·a·b
  void (*addcdiv)(Tensor& self, const Tensor& a, const Tensor& b, double value);  // self += v·a/b
  // reduce.{cpp,cu}: contiguous x [M, K] -> out [M] (rows), or x [K, M] -> out [M] (cols).
  // ArgMax writes int64; the others keep x's dtype.
  void (*reduce_rows)(ReduceOp op, const Tensor& x, Tensor& out);
  void (*reduce_cols)(ReduceOp op, const Tensor& x, Tensor& out);
  // square_sums.{cpp,cu}: out[i] = Σ_j xs[i]_j² in float64 for contiguous floating tensors on
  // out's device (out float64 [xs.size()]): clip_grad_norm_'s one pass over a model's gradients
  // (on CUDA two launches per 48 tensors). Each sum's order is fixed by the sizes alone: the same
  // bits on every run and at every thread count.
  void (*square_sums)(std::span<const Tensor> xs, Tensor& out);
  // matmul.{cpp,cu}: c = op(a)·op(b), 2-D, or 3-D batched (a or b may be 2-D and shared)
  void (*gemm)(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b);
  // softmax.{cpp,cu}: over the last dim of a contiguous [M, K]
  void (*softmax_forward)(const Tensor& x, Tensor& y);
  void (*softmax_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);  // dx = y·(dy − Σ dy·y)
  void (*log_softmax_forward)(const Tensor& x, Tensor& y);
  void (*log_softmax_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);  // dx = dy − eʸ·Σdy
  // conv.{cpp,cu}: x [N,C,H,W], w [Co,C/g,kH,kW], b [Co] or undefined, y [N,Co,Ho,Wo]. Backward
  // writes only the gradients whose tensors are defined.
  void (*conv2d_forward)(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                         const Conv2dParams& p);
  void (*conv2d_backward)(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db, const Conv2dParams& p);
  // pool.{cpp,cu}: NCHW; max pooling records the argmax (int64, index within the input plane).
  void (*max_pool2d_forward)(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p);
  // y = relu(max) (= the max of relu(x)); a window whose max is not > 0 records index −1: relu
  // passes it no gradient, and max_pool2d_backward skips it.
  void (*relu_max_pool2d_forward)(const Tensor& x, Tensor& y, Tensor& indices,
                                  const Pool2dParams& p);
  void (*max_pool2d_backward)(const Tensor& dy, const Tensor& indices, Tensor& dx,
                              const Pool2dParams& p);
  void (*avg_pool2d_forward)(const Tensor& x, Tensor& y, const Pool2dParams& p);
  void (*avg_pool2d_backward)(const Tensor& dy, Tensor& dx, const Pool2dParams& p);
  // loss.{cpp,cu}: logits [N,C], int64 target [N] -> per-row loss [N] (and log-sum-exp [N]).
  // Targets outside [0, C) other than ignore_index throw IndexError naming value and row.
  // Cross-entropy takes 16-bit logits as they are: loss, lse and dloss are in the logits'
  // accumulation dtype (float32 for bfloat16/float16), dlogits in the logits' own.
  void (*cross_entropy_forward)(const Tensor& logits, const Tensor& target, Tensor& loss,
                                Tensor& lse, const ClassLossParams& p);
  void (*cross_entropy_backward)(const Tensor& logits, const Tensor& target, const Tensor& lse,
                                 const Tensor& dloss, Tensor& dlogits, const ClassLossParams& p);
  void (*nll_loss_forward)(const Tensor& log_probs, const Tensor& target, Tensor& loss,
                           const ClassLossParams& p);
  void (*nll_loss_backward)(const Tensor& target, const Tensor& dloss, Tensor& dlog_probs,
                            const ClassLossParams& p);
  // batch_norm.{cpp,cu}: training-mode batch normalisation of contiguous x seen
  // as [N, C, S] (S: the dims after C multiplied, 1 for [N, C]), per channel over M = N·S values:
  // mean, invstd = 1/√(var + eps) with the biased var, y = (x − mean)·invstd·w + b (w, b [C] may
  // be undefined: no affine); running_mean and running_var [C], when defined, are updated in
  // place; mean and invstd [C] in the accumulation dtype. Backward: dx = w·invstd/M · (M·dy − Σdy −
  // x̂·Σdy·x̂), dw = Σdy·x̂, db = Σdy, the sums per channel; dw and db only when defined. The CUDA
  // side is cuDNN's.
  void (*batch_norm_forward)(const Tensor& x, const Tensor& w, const Tensor& b,
                             Tensor& running_mean, Tensor& running_var, const BatchNormParams& p,
                             Tensor& y, Tensor& mean, Tensor& invstd);
  void (*batch_norm_backward)(const Tensor& x, const Tensor& w, const Tensor& mean,
                              const Tensor& invstd, const Tensor& dy, double eps, Tensor& dx,
                              Tensor& dw, Tensor& db);
  // norm.{cpp,cu}: layer norm over the last dim of a contiguous x [M, K], in one pass per row:
  // y = (x − mean)·rstd·w + b with rstd = 1/√(var + eps), saving mean and rstd [M] (llm.c's
  // layout). w and b [K] may be undefined (no affine). Backward writes dx, and dw and db when they
  // are defined (sums over the rows, in a fixed order).
  void (*layer_norm_forward)(const Tensor& x, const Tensor& w, const Tensor& b, double eps,
                             Tensor& y, Tensor& mean, Tensor& rstd);
  void (*layer_norm_backward)(const Tensor& x, const Tensor& w, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw,
                              Tensor& db);
  // embedding.{cpp,cu}: out [N, D] = weight[ids], ids int64 [N]; an id outside [0, V) is an
  // IndexError naming the id, its position and V. Backward: dweight [V, D] = Σ dy rows by id (in
  // position order), padding_idx's row left at zero (−1: none).
  void (*embedding_forward)(const Tensor& weight, const Tensor& ids, Tensor& out);
  void (*embedding_backward)(const Tensor& ids, const Tensor& dy, Tensor& dweight,
                             int64_t padding_idx);
  // attention.{cpp,cu}: fused scaled-dot-product attention (FlashAttention's online softmax) on
  // contiguous q [B, Tq, D], k [B, Tk, D], v [B, Tk, Dv] and an additive mask [1 or B, Tq, Tk] (or
  // undefined): out [B, Tq, Dv] and the log-sum-exp of each row's scores, lse [B, Tq] (−∞ for a
  // row that sees no key; its output is 0). Backward recomputes the probabilities from lse.
  void (*attention_forward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                            const AttentionParams& p, Tensor& out, Tensor& lse);
  void (*attention_backward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv);
  // index.{cpp,cu}: along the last dim of contiguous [M, N] tensors; index and out [M, K].
  // gather: out[m, j] = x[m, index[m, j]]; scatter_add: out = 0, then out[m, index[m, j]] +=
  // src[m, j] (j in order). An index outside [0, N) is an IndexError naming it and its position.
  // topk: the k largest (or smallest) of each row, in order, ties to the lower index.
  // multinomial: `samples` indices per row drawn with probability ∝ the row (without replacement:
  // each at most once), counter (offset + m·samples + s) of `rng` for draw s of row m; a row with
  // a negative, NaN or inf entry, or summing to 0, is a ValueError naming the row.
  void (*gather)(const Tensor& x, const Tensor& index, Tensor& out);
  void (*scatter_add)(const Tensor& index, const Tensor& src, Tensor& out);
  void (*topk)(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices);
  void (*multinomial)(const Tensor& probs, int64_t samples, bool replacement, GeneratorState rng,
                      Tensor& out);
  // optim.{cpp,cu}: fused parameter updates on contiguous tensors of one shape
  void (*sgd_step)(Tensor& param, const Tensor& grad, Tensor& momentum_buffer, const SgdParams& p);
  void (*adam_step)(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    const AdamParams& p);
  // Adam over many parameters of one device sharing the scalars: on CUDA one launch per batch of
  // up to 48 float32/float64 tensors (PyTorch's multi_tensor_apply) instead of one per tensor; the
  // arithmetic of adam_step, which it equals bit for bit
  void (*adam_step_many)(std::span<const AdamSlot> slots, const AdamParams& p);
  // adam_step_many deciding on the device whether to step (a GradScaler's step with no host
  // read): nothing changes when found_inf (float32 [1]; undefined: never) is nonzero; otherwise
  // each slot's `step` (float32 [], set in every slot) advances by one and the bias corrections
  // come from it, as adam_step's do from AdamParams::step (p.step is not read)
  void (*adam_step_many_unless)(std::span<const AdamSlot> slots, const AdamParams& p,
                                const Tensor& found_inf);
  // GradScaler's pass: grad *= 1/scale (scale float32 [1], the reciprocal rounded to float32, as
  // PyTorch), and found_inf (float32 [1]) is set to 1 when any element of the result is inf or
  // NaN (left as it is otherwise, so it gathers over calls). All on the gradient's device.
  void (*unscale_grad)(Tensor& grad, const Tensor& scale, Tensor& found_inf);
  // GradScaler's update on the scale's device (torch._amp_update_scale_): after a step with an
  // inf/NaN (found_inf != 0) scale ×= backoff, growth_tracker = 0 and skipped += 1; otherwise
  // growth_tracker += 1, and at growth_interval scale ×= growth (kept only if finite) and
  // growth_tracker = 0. scale and found_inf float32 [1], growth_tracker and skipped int64 [1].
  void (*amp_update_scale)(Tensor& scale, Tensor& growth_tracker, Tensor& skipped,
                           const Tensor& found_inf, const AmpScaleParams& p);
};

/// The kernel table for `device`'s backend. Throws DeviceError if this build has none.
const Kernels& kernels(Device device);

/// How the CPU backend multiplies matrices of dtype t, for `tandem devices`: for bfloat16 and
/// float16, oneDNN's kernel ("oneDNN brg:avx512_core_bf16") or conversion to float32.
std::string cpu_gemm_path(DType t);
/// The same for convolutions ("oneDNN jit_bf16:avx512_core_bf16 on blocked layouts").
std::string cpu_conv_path(DType t);

}  // namespace tandem
