// nn/layer_norm.cpp — LayerNorm.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/layer_norm.h>

namespace tandem::nn {

LayerNorm::LayerNorm(Shape shape, LayerNormOptions o)
    : normalized_shape(std::move(shape)), eps(o.eps) {
  TD_CHECK_VALUE(!normalized_shape.empty(), "LayerNorm: normalized_shape is empty");
  for (int64_t d : normalized_shape)
    TD_CHECK_VALUE(d > 0, "LayerNorm: normalized_shape ", normalized_shape,
                   " has a dimension that is not positive");
  if (o.elementwise_affine) {
    weight = ones(normalized_shape, o.tensor).requires_grad_();
    if (o.bias) bias = zeros(normalized_shape, o.tensor).requires_grad_();
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

void LayerNorm::visit(Visitor& v) {
  if (weight.defined()) v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (int64_t d : normalized_shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  return tandem::str("(", dims, normalized_shape.size() == 1 ? ",)" : ")", ", eps=", eps,
                     ", elementwise_affine=", weight.defined() ? "True" : "False");
}

}  // namespace tandem::nn
