// nn/loss.h — loss modules over the loss ops of autograd/ops/nn_ops.h, as torch.nn's:
// CrossEntropyLoss (mean/sum/none, label smoothing, ignore_index), NLLLoss, MSELoss.
#pragma once

#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/nn/module.h>

namespace tandem::nn {

using tandem::ClassLossOptions;
using tandem::cross_entropy;
using tandem::mse_loss;
using tandem::nll_loss;
using tandem::Reduction;

struct CrossEntropyLoss : Module {
  explicit CrossEntropyLoss(ClassLossOptions options = {}) : options(options) {}
  ClassLossOptions options;
  /// logits [N, C], int64 targets [N]
  Tensor forward(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options);
  }
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return forward(logits, target);
  }
  void visit(Visitor&) override {}
};

struct NLLLoss : Module {
  explicit NLLLoss(ClassLossOptions options = {}) : options(options) {}
  ClassLossOptions options;
  Tensor forward(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, options);
  }
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return forward(log_probs, target);
  }
  void visit(Visitor&) override {}
};

struct MSELoss : Module {
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Reduction reduction;
  Tensor forward(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }
  void visit(Visitor&) override {}
};

}  // namespace tandem::nn
