// nn/pooling.h — MaxPool2d and AvgPool2d (square windows; stride defaults to the kernel size), and
// ReLUMaxPool2d: ReLU then MaxPool2d as one layer (relu_max_pool2d).
#pragma once

#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/nn/module.h>

namespace tandem::nn {

struct PoolOptions {
  int64_t stride = 0;  // 0: the kernel size, as PyTorch
  int64_t padding = 0;
  bool count_include_pad = true;  // AvgPool2d only
};

namespace detail {
inline Pool2dParams pool_params(int64_t k, const PoolOptions& o) {
  const int64_t s = o.stride > 0 ? o.stride : k;
  return {k, k, s, s, o.padding, o.padding, o.count_include_pad};
}
inline std::string max_pool_repr(const Pool2dParams& p) {
  return tandem::str("kernel_size=", p.kernel_h, ", stride=", p.stride_h, ", padding=", p.pad_h,
                     ", dilation=1, ceil_mode=False");
}
}  // namespace detail

struct MaxPool2d : Module {
  explicit MaxPool2d(int64_t kernel_size, PoolOptions options = {})
      : params(detail::pool_params(kernel_size, options)) {}
  Pool2dParams params;
  Tensor forward(const Tensor& x) const { return max_pool2d(x, params); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override { return detail::max_pool_repr(params); }
};

// nn.ReLU() followed by nn.MaxPool2d(k), computed in one pass; it has no PyTorch twin, so a
// state dict or a printed model has nothing to match here (neither layer has parameters). Not a
// MaxPool2d subclass: forward is not virtual, so one seen as a MaxPool2d would drop the relu.
struct ReLUMaxPool2d : Module {
  explicit ReLUMaxPool2d(int64_t kernel_size, PoolOptions options = {})
      : params(detail::pool_params(kernel_size, options)) {}
  Pool2dParams params;
  Tensor forward(const Tensor& x) const { return relu_max_pool2d(x, params); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override { return detail::max_pool_repr(params); }
};

struct AvgPool2d : Module {
  explicit AvgPool2d(int64_t kernel_size, PoolOptions options = {})
      : params(detail::pool_params(kernel_size, options)) {}
  Pool2dParams params;
  Tensor forward(const Tensor& x) const { return avg_pool2d(x, params); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override {
    return tandem::str("kernel_size=", params.kernel_h, ", stride=", params.stride_h,
                       ", padding=", params.pad_h);
  }
};

}  // namespace tandem::nn
