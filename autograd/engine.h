// autograd/engine.h — reverse-mode execution of the graph (Tensor::backward calls this).
#pragma once

#include <tandem/core/tensor.h>

namespace tandem {

/// Back-propagates `grad` from `root` through the recorded graph, accumulating into leaves' .grad.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

}  // namespace tandem
