// nn/batchnorm.cpp — batch normalisation: with the batch's statistics (training), the fused
// batch_norm op (autograd/ops/norm.cpp); with the running statistics (evaluation), composed of
// differentiable ops (a subtraction, a division and the affine, broadcast per channel).
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/nn/batchnorm.h>

namespace tandem::nn {

BatchNorm::BatchNorm(int64_t c, int dims, BatchNormOptions o)
    : num_features(c), options(o), dims_(dims) {
  TD_CHECK_VALUE(c > 0, "BatchNorm: num_features must be positive, got ", c);
  if (o.affine) {
    weight = ones({c}, o.tensor).requires_grad_();
    bias = zeros({c}, o.tensor).requires_grad_();
  }
  if (o.track_running_stats) {
    running_mean = zeros({c}, o.tensor);
    running_var = ones({c}, o.tensor);
    num_batches_tracked = zeros({}, {.dtype = DType::i64, .device = o.tensor.device});
  }
}

void BatchNorm::visit(Visitor& v) {
  if (weight.defined()) v("weight", weight);
  if (bias.defined()) v("bias", bias);
  if (running_mean.defined()) {
    v.buffer("running_mean", running_mean);
    v.buffer("running_var", running_var);
    v.buffer("num_batches_tracked", num_batches_tracked);
  }
}

// y = (x − μ) / √(σ² + ε) · γ + β, statistics over every dim but C
Tensor BatchNorm::forward(const Tensor& x) {
  const char* op = dims_ == 1 ? "BatchNorm1d" : "BatchNorm2d";
  const bool ok = dims_ == 1 ? (x.dim() == 2 || x.dim() == 3) : x.dim() == 4;
  TD_CHECK_SHAPE(ok, op, ": expected input ", dims_ == 1 ? "[N, C] or [N, C, L]" : "[N, C, H, W]",
                 ", but got shape ", x.shape());
  TD_CHECK_SHAPE(x.size(1) == num_features, op, ": input ", x.shape(), " has ", x.size(1),
                 " channels; expected ", num_features);
  if (is_training() || !running_mean.defined()) {  // the batch's statistics: one fused op
    TD_CHECK_VALUE(!is_training() || x.numel() / num_features > 1, op,
                   ": expected more than 1 value per channel in training, got input ", x.shape());
    // Once per batch: when activation checkpointing runs this forward again in backward, the
    // statistics were updated already (and the recompute sees the same batch).
    const bool update = is_training() && running_mean.defined() && !recomputing_activations();
    if (update) {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1.0);
    }
    return batch_norm(x, weight, bias, update ? running_mean : Tensor(),
                      update ? running_var : Tensor(), options.momentum, options.eps);
  }
  Shape stat_shape(size_t(x.dim()), 1);
  stat_shape[1] = num_features;
  Tensor y = (x - running_mean.reshape(stat_shape)) /
             (running_var.reshape(stat_shape) + options.eps).sqrt();
  if (weight.defined()) y = y * weight.reshape(stat_shape) + bias.reshape(stat_shape);
  return y;
}

std::string BatchNorm::extra_repr() const {
  return tandem::str(num_features, ", eps=", options.eps, ", momentum=", options.momentum,
                     ", affine=", options.affine ? "True" : "False",
                     ", track_running_stats=", options.track_running_stats ? "True" : "False");
}

}  // namespace tandem::nn
