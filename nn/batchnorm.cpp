// nn/batchnorm.cpp — batch normalisation composed of differentiable ops (mean, variance,
// broadcasting), so its gradient is exact by construction and gradchecked like any op.
#include <tandem/autograd/grad_mode.h>
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
  Shape dims{0}, stat_shape(size_t(x.dim()), 1);
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  stat_shape[1] = num_features;
  const bool use_batch = is_training() || !running_mean.defined();
  Tensor mean, var;
  if (use_batch) {
    const int64_t count = x.numel() / num_features;
    TD_CHECK_VALUE(!is_training() || count > 1, op,
                   ": expected more than 1 value per channel in training, got input ", x.shape());
    mean = tandem::mean(x, dims, true);
    Tensor centered = x - mean;
    var = tandem::mean(centered * centered, dims, true);  // biased, for normalising
    // Once per batch: when activation checkpointing runs this forward again in backward, the
    // statistics were updated already (and the recompute sees the same batch).
    if (is_training() && running_mean.defined() && !recomputing_activations()) {
      NoGradGuard no_grad;
      const double m = options.momentum;
      running_mean.mul_(1 - m).add_(mean.detach().reshape({num_features}), m);
      running_var.mul_(1 - m).add_(
          var.detach().reshape({num_features}) * (double(count) / double(count - 1)), m);
      num_batches_tracked.add_(1.0);
    }
  } else {
    mean = running_mean.reshape(stat_shape);
    var = running_var.reshape(stat_shape);
  }
  Tensor y = (x - mean) / (var + options.eps).sqrt();
  if (weight.defined()) y = y * weight.reshape(stat_shape) + bias.reshape(stat_shape);
  return y;
}

std::string BatchNorm::extra_repr() const {
  return tandem::str(num_features, ", eps=", options.eps, ", momentum=", options.momentum,
                     ", affine=", options.affine ? "True" : "False",
                     ", track_running_stats=", options.track_running_stats ? "True" : "False");
}

}  // namespace tandem::nn
