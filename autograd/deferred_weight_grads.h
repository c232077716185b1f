// autograd/deferred_weight_grads.h — weight gradients put off until later: the "W" of the
// zero-bubble pipelines (Qi et al. 2023; torch.distributed.pipelining's backward_weight).
//
// A Linear layer's backward does two products. dx = dy·W is what the layer before it waits for;
// dW = dyᵀ·x is waited for by nobody until the optimizer step. A backward called with
// {.defer_weight_grads = true} computes only the first kind: an op that recorded a weight-gradient
// part (node.h's WeightGrad, written beside its backward, as linear.cpp does) whose weight is a
// leaf hands (dy, x) to the graph task instead, and the backward returns them all as a
// DeferredWeightGrads. run() later does one product per weight over every row it was handed (the
// dy's and x's of several backward passes concatenated: the same sum of per-sample terms, added
// in one product) and accumulates it into .grad as backward would have, with the leaf's hooks and
// post-accumulate hooks. Until then it holds the dy's and x's (layer inputs the backward would
// otherwise have freed).
//
//   autograd::DeferredWeightGrads w;
//   for (Tensor& loss : micro_batch_losses)
//     w.append(autograd::backward(loss, {.defer_weight_grads = true}));  // dx only
//   w.run();  // every deferred dW into .grad, then the backward's callbacks
//
// What is deferred: the weight-gradient part of an op whose weight reaches the op as itself (a
// leaf that requires grad: not autocast's cast of it) and gets no other gradient in that backward
// (a tied weight's would fire its hooks twice). Everything else (biases, convolutions, matmul,
// tied weights) is computed in backward as usual and accumulated then.
// The callbacks queued during the backward (queue_callback: DistributedDataParallel's
// end-of-backward work) run at the end of run(), when every gradient is in; hooks that run()
// fires may queue more. A run() that fails (a hook throws) keeps the weights whose gradients it
// had not added yet, and the callbacks, for another run().
#pragma once

#include <tandem/autograd/node.h>
#include <functional>
#include <vector>

namespace tandem::autograd {

class [[nodiscard]] DeferredWeightGrads {
 public:
  /// One op's deferred part: fn(dy, operand) is the gradient of `leaf`.
  struct Part {
    Tensor leaf;
    WeightGradFn fn;
    Tensor dy, operand;
    uint64_t sequence_nr;  // of the op's node: parts of one backward are kept in its run order
  };

  /// Takes over `other`'s parts and callbacks, after this one's.
  void append(DeferredWeightGrads&& other);

  /// Each weight's gradient over every row it was handed (in the order the weights were first
  /// deferred), accumulated into .grad; then the callbacks. Empty afterwards.
  void run();

  /// How many parts (one per op and backward) wait.
  size_t size() const { return parts_.size(); }
  bool empty() const { return parts_.empty() && callbacks_.empty(); }

  /// For the engine: the parts of one backward, and the callbacks to run after them.
  void add(Part part) { parts_.push_back(std::move(part)); }
  void add_callback(std::function<void()> fn) { callbacks_.push_back(std::move(fn)); }
  /// Puts the parts of one backward (several threads may have added them) in the order one thread
  /// would have: latest op first.
  void sort_by_run_order();

 private:
  std::vector<Part> parts_;
  std::vector<std::function<void()>> callbacks_;
};

}  // namespace tandem::autograd
