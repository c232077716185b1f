// nn/layer_norm.h — LayerNorm over the trailing normalized_shape dims (PyTorch's nn.LayerNorm:
// weight ones, bias zeros; without elementwise_affine, neither).
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;  // with elementwise_affine: a bias too (GPT-2 has one; some models drop it)
  TensorOptions tensor = {};
};

struct LayerNorm : Module {
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t features, LayerNormOptions options = {})
      : LayerNorm(Shape{features}, options) {}

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;  // normalized_shape, or undefined

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
  std::string extra_repr() const override;
};

}  // namespace tandem::nn
