// nn/conv.h — 2-D convolution as torch.nn.Conv2d: stride, padding, dilation, groups, bias;
// weight [out, in / groups, kH, kW]; kaiming-uniform initialisation as PyTorch's.
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  TensorOptions tensor = {};
};

struct Conv2d : Module {
  /// A square kernel_size × kernel_size convolution.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
         Conv2dOptions options = {});

  int64_t in_channels, out_channels, kernel_size;
  Conv2dOptions options;
  Tensor weight;  // [out_channels, in_channels / groups, k, k]
  Tensor bias;    // [out_channels], undefined without bias

  /// x [N, in_channels, H, W] -> [N, out_channels, H', W']
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
  std::string extra_repr() const override;
};

}  // namespace tandem::nn
