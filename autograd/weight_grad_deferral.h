// autograd/weight_grad_deferral.h — putting weight gradients off until later: the "W" of the
// zero-bubble pipelines (Qi et al. 2023; torch.distributed.pipelining's backward_weight).
//
// A Linear layer's backward does two products. dx = dy·W is what the layer before it waits for;
// dW = dyᵀ·x is waited for by nobody until the optimizer step. A pipeline runs each micro-batch's
// backward separately, so without deferral every weight gradient is M products of a few rows
// each, done on the critical path and each added into .grad. While a WeightGradDeferral is current
// on the thread running a backward, linear's backward hands (dy, x) for a weight that is a leaf to
// it and computes only dx; flush() then does one product per weight over all the rows it was
// handed (cat of the dy's and of the x's: the same sum of per-sample terms, added in one product)
// and accumulates it into .grad as the engine would have, the leaf's hooks and post-accumulate
// hooks included. Until flush() the deferral holds the dy's and x's (the layer inputs the
// backward would otherwise have freed).
//
//   auto deferral = std::make_shared<WeightGradDeferral>();
//   {
//     WeightGradDeferralGuard guard(deferral);
//     for (Tensor& loss : micro_batch_losses) loss.backward();  // dx only for Linear weights
//   }
//   deferral->flush();  // every deferred dW into .grad
//
// What is deferred: linear's weight, when it reaches backward as itself (a leaf that requires
// grad: not autocast's cast of it, not a copy saved by saved-tensor hooks or activation
// checkpointing). Everything else (biases, convolutions, matmul, the other uses of a tied weight)
// is computed in backward as usual and accumulated then. autograd::grad never defers: it must
// return every gradient it is asked for.
//
// The weights' hooks and post-accumulate hooks run in flush(), after the backward pass: a hook that
// needs to run inside backward (DistributedDataParallel's, which queues a callback) does not work
// with a deferral. A flush that fails (a hook throws) leaves the weights it did not reach pending;
// a backward that fails midway leaves what it deferred until then.
#pragma once

#include <tandem/core/tensor.h>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem {

class WeightGradDeferral {
 public:
  /// Takes dW += dyᵀ·x for `weight` (dy: [n, out], x: [n, in], on the weight's device and in its
  /// dtype); false (the caller computes it) unless the weight is a leaf that requires grad.
  bool defer(const Tensor& weight, const Tensor& dy, const Tensor& x);

  /// Computes each weight's gradient over every deferred row, in the order the weights were first
  /// deferred, and accumulates it into .grad; the deferral is empty again afterwards.
  void flush();

  /// How many (dy, x) pairs wait.
  size_t pending() const;

  /// The calling thread's deferral, or null. It follows work into backward threads
  /// (ThreadLocalState).
  static std::shared_ptr<WeightGradDeferral> current();
  static void set_current(std::shared_ptr<WeightGradDeferral> deferral);

 private:
  struct Weight {
    Tensor weight;
    std::vector<Tensor> dy, x;
  };
  mutable std::mutex mutex_;  // backward threads of several devices may defer at once
  std::vector<Weight> weights_;
};

/// Makes `deferral` (may be null: nothing deferred) current on this thread for the scope.
class WeightGradDeferralGuard {
 public:
  explicit WeightGradDeferralGuard(std::shared_ptr<WeightGradDeferral> deferral);
  ~WeightGradDeferralGuard();
  WeightGradDeferralGuard(const WeightGradDeferralGuard&) = delete;
  WeightGradDeferralGuard& operator=(const WeightGradDeferralGuard&) = delete;

 private:
  std::shared_ptr<WeightGradDeferral> previous_;
};

}  // namespace tandem
