// nn/dropout.h — Dropout: in training, zeroes each element with probability p and scales the rest
// by 1/(1 − p), drawing from the input device's generator; in eval mode it is the identity.
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

/// The dropout op itself (a no-op when !training or p == 0).
Tensor dropout(const Tensor& x, double p, bool training);

struct Dropout : Module {
  explicit Dropout(double p = 0.5);
  double p;
  Tensor forward(const Tensor& x) const { return dropout(x, p, is_training()); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override { return tandem::str("p=", p, ", inplace=False"); }
};

}  // namespace tandem::nn
