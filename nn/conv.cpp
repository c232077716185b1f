// nn/conv.cpp — Conv2d: parameters, PyTorch's initialisation, and the call into the conv2d op.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/nn/conv.h>
#include <tandem/nn/init.h>
#include <cmath>

namespace tandem::nn {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, Conv2dOptions o)
    : in_channels(in), out_channels(out), kernel_size(k), options(o) {
  TD_CHECK_VALUE(in > 0 && out > 0 && k > 0,
                 "Conv2d: channels and kernel_size must be positive, got ", in, ", ", out, ", ", k);
  TD_CHECK_VALUE(o.groups >= 1 && in % o.groups == 0 && out % o.groups == 0,
                 "Conv2d: groups=", o.groups, " must divide in_channels=", in,
                 " and out_channels=", out);
  weight = empty({out, in / o.groups, k, k}, o.tensor);
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  weight.requires_grad_();
  if (o.bias) {
    bias = empty({out}, o.tensor);
    const double bound = 1.0 / std::sqrt(double(in / o.groups * k * k));
    init::uniform_(bias, -bound, bound);
    bias.requires_grad_();
  }
}

Tensor Conv2d::forward(const Tensor& x) const {
  const Conv2dParams p{options.stride,   options.stride,   options.padding, options.padding,
                       options.dilation, options.dilation, options.groups};
  return conv2d(x, weight, bias, p);
}

void Conv2d::visit(Visitor& v) {
  v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string Conv2d::extra_repr() const {
  std::string s =
      tandem::str(in_channels, ", ", out_channels, ", kernel_size=(", kernel_size, ", ",
                  kernel_size, "), stride=(", options.stride, ", ", options.stride, ")");
  if (options.padding != 0)
    s += tandem::str(", padding=(", options.padding, ", ", options.padding, ")");
  if (options.dilation != 1)
    s += tandem::str(", dilation=(", options.dilation, ", ", options.dilation, ")");
  if (options.groups != 1) s += tandem::str(", groups=", options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

}  // namespace tandem::nn
