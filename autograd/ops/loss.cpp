// autograd/ops/loss.cpp — cross-entropy (fused with log-softmax), NLL and MSE. The per-row loss
// comes from a kernel; the reduction (mean over non-ignored rows, sum, or none) is done here.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

void check_class_loss(const char* op, const Tensor& input, const Tensor& target,
                      const ClassLossOptions& o) {
  check_same_device(op, {{"input", input}, {"target", target}});
  check_floating(op, "input", input);
  TD_CHECK_DTYPE(target.dtype() == DType::i64, op, ": target has dtype ", target.dtype(),
                 "; expected int64 class indices in [0, ", input.dim() == 2 ? input.size(1) : -1,
                 ")");
  check_dim(op, "input", input, 2, "[N, C]");
  // Rows with no class to be right about have no loss (PyTorch fails on their targets instead).
  TD_CHECK_SHAPE(input.size(1) > 0 || input.size(0) == 0, op, ": input ", input.shape(),
                 " has no classes; expected [N, C] with C >= 1");
  TD_CHECK_SHAPE(target.dim() == 1 && target.size(0) == input.size(0), op, ": target ",
                 target.shape(), " does not match input ", input.shape(), "; expected [",
                 input.size(0), "]");
  TD_CHECK_VALUE(o.label_smoothing >= 0 && o.label_smoothing <= 1, op, ": label_smoothing ",
                 o.label_smoothing, " is not in [0, 1]");
}

// Reduces per-row losses [N]: mean over the rows whose target is not ignored, sum, or none.
Tensor reduce_rows(const Tensor& rows, const Tensor& target, const ClassLossOptions& o) {
  if (o.reduction == Reduction::None) return rows;
  if (o.reduction == Reduction::Sum) return sum(rows);
  // The count stays a tensor, as in PyTorch: reading it on the host would stop a GPU every step.
  const Tensor count = target.ne(double(o.ignore_index)).sum().to(rows.dtype());
  return sum(rows) / count;  // all rows ignored: 0/0 = nan, as PyTorch
}

}  // namespace

// loss_i = −Σ_j q_ij · log softmax(x_i)_j,  q = (1 − ε)·one_hot(t_i) + ε/C
// dx_i = dloss_i · (softmax(x_i) − q_i)
//
// 16-bit logits are not cast: the kernels read them in place and compute in float32, so the
// per-row loss, the log-sum-exp and the gradient flowing back are float32 until dx, rounded once
// into the logits' dtype. Under autocast (whose float32 list has cross_entropy) that is what a
// float32 copy of the logits would give, without the copy: for a GPT, tokens × vocabulary floats
// written and read once more each way, the step's largest activation. Outside autocast a 16-bit
// loss comes back in the logits' dtype, as PyTorch's, rounded once at the end.
Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, const ClassLossOptions& o) {
  check_class_loss("cross_entropy", logits_in, target_in, o);
  const Tensor logits = detail::contiguous(logits_in), target = detail::contiguous(target_in);
  const ClassLossParams p{o.ignore_index, o.label_smoothing};
  const TensorOptions wide{.dtype = accumulate_dtype(logits.dtype()), .device = logits.device()};
  Tensor rows = empty({logits.size(0)}, wide);
  Tensor lse = empty({logits.size(0)}, wide);
  if (logits.numel() > 0)
    kernels(logits.device()).cross_entropy_forward(logits, target, rows, lse, p);
  rows = record("cross_entropy", rows, {logits_in},
                {{"input", logits}, {"target", target}, {"logsumexp", lse}},
                [p](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  const Tensor &logits = s[0], &target = s[1], &lse = s[2];
                  Tensor dx = empty_like(logits);
                  if (dx.numel() > 0)
                    kernels(dy.device()).cross_entropy_backward(logits, target, lse, dy, dx, p);
                  return {dx};
                });
  const Tensor loss = reduce_rows(rows, target, o);
  if (loss.dtype() == logits.dtype() || autocast::is_enabled(logits.device().type())) return loss;
  return loss.to(logits.dtype());
}

// loss_i = −log_probs[i, t_i]        dlog_probs[i, t_i] = −dloss_i
Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target_in, const ClassLossOptions& o) {
  if (auto c = autocast::float32({log_probs_in})) return nll_loss((*c)[0], target_in, o);
  check_class_loss("nll_loss", log_probs_in, target_in, o);
  TD_CHECK_VALUE(o.label_smoothing == 0,
                 "nll_loss: label smoothing needs the logits; use cross_entropy");
  const Tensor log_probs = detail::contiguous(log_probs_in), target = detail::contiguous(target_in);
  const ClassLossParams p{o.ignore_index, 0.0};
  Tensor rows = empty({log_probs.size(0)}, log_probs.options());
  if (rows.numel() > 0) kernels(log_probs.device()).nll_loss_forward(log_probs, target, rows, p);
  rows = record(
      "nll_loss", rows, {log_probs_in}, {{"target", target}},
      [p, shape = log_probs.shape()](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        Tensor dx = empty(shape, dy.options());
        if (dx.numel() > 0) kernels(dy.device()).nll_loss_backward(s[0], dy, dx, p);
        return {dx};
      });
  return reduce_rows(rows, target, o);
}

// loss = mean/sum of (x − y)²
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (auto c = autocast::float32({input, target})) return mse_loss((*c)[0], (*c)[1], reduction);
  TD_CHECK_SHAPE(input.shape() == target.shape(), "mse_loss: input ", input.shape(), " and target ",
                 target.shape(), " must have the same shape");
  Tensor d = input - target;
  Tensor sq = d * d;
  if (reduction == Reduction::None) return sq;
  return reduction == Reduction::Sum ? sum(sq) : mean(sq);
}

}  // namespace tandem
