// nn/linear.h — the fully connected layer, y = x·Wᵀ + b, as torch.nn.Linear (same parameter
// names, layouts and default initialisation, so its state_dict loads in PyTorch).
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

struct LinearOptions {
  bool bias = true;
  TensorOptions tensor = {};  // dtype and device of the parameters
};

struct Linear : Module {
  Linear(int64_t in_features, int64_t out_features, LinearOptions options = {});

  int64_t in_features, out_features;
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features], undefined without bias

  /// x [*, in_features] -> [*, out_features]
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
  std::string extra_repr() const override;
};

}  // namespace tandem::nn
