// nn/activation.h — parameterless layers: ReLU, GELU, Tanh, Sigmoid, Flatten, Identity. Each is
// a Module (so it prints and sits in a Sequential) whose forward is one op.
#pragma once

#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/module.h>

namespace tandem::nn {

struct ReLU : Module {
  Tensor forward(const Tensor& x) const { return relu(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
};

struct GELU : Module {
  explicit GELU(GeluApproximate approximate = GeluApproximate::None) : approximate(approximate) {}
  GeluApproximate approximate;  // Tanh: GPT-2's form
  Tensor forward(const Tensor& x) const { return gelu(x, approximate); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override {
    return approximate == GeluApproximate::Tanh ? "approximate='tanh'" : "approximate='none'";
  }
};

struct Tanh : Module {
  Tensor forward(const Tensor& x) const { return tanh(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
};

struct Sigmoid : Module {
  Tensor forward(const Tensor& x) const { return sigmoid(x); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
};

struct Identity : Module {
  Tensor forward(const Tensor& x) const { return x; }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
};

/// Flattens dims [start_dim, end_dim] into one ([N, C, H, W] -> [N, C·H·W] by default).
struct Flatten : Module {
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  int64_t start_dim, end_dim;
  Tensor forward(const Tensor& x) const { return x.flatten(start_dim, end_dim); }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor&) override {}
  std::string extra_repr() const override {
    return tandem::str("start_dim=", start_dim, ", end_dim=", end_dim);
  }
};

}  // namespace tandem::nn
