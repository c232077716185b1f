// tools/train/graphed_step.h — `tandem train --cuda-graphs`: the whole training step (zero_grad,
// forward, loss, backward, the optimizer and the gradient scaler) as one CUDA graph
// (core/cuda/graph.h). The first steps run eagerly (the optimizer makes its state, cuDNN picks its
// algorithms), the next is captured on static input tensors, and every later batch is copied
// into them and the graph replayed. A batch of another shape (an epoch's last, smaller one) runs
// eagerly. What the graph cannot hold fails at capture with the reason: dropout (its mask would
// repeat), a changing learning rate (config.cpp asks for --schedule none), a host read.
#pragma once

#include <tandem/core/tensor.h>
#include <functional>
#include <memory>
#include <utility>

namespace tandem::cuda {
class Graph;
}

namespace tandem::tools {

class GraphedStep {
 public:
  /// `step` trains on (x, y) and returns (loss, output).
  using Step = std::function<std::pair<Tensor, Tensor>(const Tensor& x, const Tensor& y)>;
  GraphedStep(Device device, Step step);
  ~GraphedStep();

  /// The step on (x, y), eagerly or by replay; the tensors returned by a replay are the graph's
  /// own, overwritten by the next one.
  std::pair<Tensor, Tensor> operator()(const Tensor& x, const Tensor& y);
  /// Steps replayed so far.
  int64_t replays() const { return replays_; }

 private:
  static constexpr int kEagerSteps = 3;
  Device device_;
  Step step_;
  int eager_ = 0;
  int64_t replays_ = 0;
  std::shared_ptr<cuda::Graph> graph_;  // (shared: complete only in CUDA builds)
  Tensor x_, y_, loss_, output_;        // the captured step's inputs and results
};

}  // namespace tandem::tools
