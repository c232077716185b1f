// autograd/engine.h — reverse-mode execution of the graph (Tensor::backward calls this).
#pragma once

#include <tandem/core/tensor.h>
#include <functional>

namespace tandem {

/// Back-propagates `grad` from `root` through the recorded graph, accumulating into leaves' .grad.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

/// Runs `fn` once the backward pass now running on this thread has finished (after every
/// gradient is accumulated), as PyTorch's Engine::queue_callback. DistributedDataParallel uses it
/// to wait for its all-reduces before backward() returns. Only callable during backward (from a
/// hook); AutogradError otherwise.
void queue_callback(std::function<void()> fn);

}  // namespace tandem
