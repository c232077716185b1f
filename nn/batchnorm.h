// nn/batchnorm.h — BatchNorm1d ([N, C] or [N, C, L]) and BatchNorm2d ([N, C, H, W]), as PyTorch:
// in training, normalise with the batch's statistics and update running_mean/running_var
// (unbiased variance) with `momentum`; in eval, normalise with the running statistics.
#pragma once

#include <tandem/nn/module.h>

namespace tandem::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  TensorOptions tensor = {};
};

struct BatchNorm : Module {
  BatchNorm(int64_t num_features, int dims, BatchNormOptions options = {});

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                    // [C] (affine)
  Tensor running_mean, running_var, num_batches_tracked;  // buffers; the last is int64 []

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  void visit(Visitor& v) override;
  std::string extra_repr() const override;

 private:
  int dims_;  // 1 or 2: which input ranks are accepted
};

struct BatchNorm1d : BatchNorm {
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, 1, options) {}
};

struct BatchNorm2d : BatchNorm {
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {})
      : BatchNorm(num_features, 2, options) {}
};

}  // namespace tandem::nn
