// nn/linear.cpp — Linear: PyTorch's initialisation (kaiming-uniform with a = √5, i.e. weights and
// bias uniform in ±1/√in_features).
#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/init.h>
#include <tandem/nn/linear.h>
#include <cmath>

namespace tandem::nn {

Linear::Linear(int64_t in, int64_t out, LinearOptions o) : in_features(in), out_features(out) {
  TD_CHECK_VALUE(in > 0 && out > 0, "Linear: in_features and out_features must be positive, got ",
                 in, " and ", out);
  weight = empty({out, in}, o.tensor);
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  weight.requires_grad_();
  if (o.bias) {
    bias = empty({out}, o.tensor);
    const double bound = 1.0 / std::sqrt(double(in));
    init::uniform_(bias, -bound, bound);
    bias.requires_grad_();
  }
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

void Linear::visit(Visitor& v) {
  v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string Linear::extra_repr() const {
  return tandem::str("in_features=", in_features, ", out_features=", out_features,
                     ", bias=", bias.defined() ? "True" : "False");
}

}  // namespace tandem::nn
