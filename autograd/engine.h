// autograd/engine.h — reverse-mode execution of the graph (Tensor::backward calls this).
#pragma once

#include <tandem/autograd/deferred_weight_grads.h>
#include <tandem/core/tensor.h>
#include <functional>
#include <vector>

namespace tandem {

/// Back-propagates `grad` from `root` through the recorded graph, accumulating into leaves' .grad.
/// Nodes on cpu:N (N ≥ 1) and cuda:N run on their device's backward thread, nodes on `cpu` on the
/// calling thread, which waits for all of them. The first error on any thread is rethrown here,
/// with the op and the device in front of its message, and the rest of the work is dropped.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

namespace autograd {
struct BackwardOptions {
  Tensor grad_output;         // d(loss)/d(output); default: ones for a one-element output
  bool retain_graph = false;  // keep the saved tensors for another backward
  /// Leave the weight-gradient part of the ops that have one (Linear's dW = dyᵀ·x) for later:
  /// backward computes the rest and returns those parts (deferred_weight_grads.h).
  bool defer_weight_grads = false;
};
/// run_backward with options; returns what it deferred (nothing unless defer_weight_grads). The
/// callbacks queued during it run when every gradient is in: at its end, or at the end of the
/// returned parts' run() if it deferred any.
[[nodiscard]] DeferredWeightGrads backward(const Tensor& output,
                                           const BackwardOptions& options = {});

struct GradOptions {
  Tensor grad_output;         // d(loss)/d(output); default: ones for a one-element output
  bool retain_graph = false;  // keep the saved tensors for another backward
  bool allow_unused = false;  // an input the output does not depend on gives an undefined tensor
};
/// d(output)/d(input) for each input, without writing any .grad (PyTorch's torch.autograd.grad):
/// a partial backward. Only the part of the graph between the output and the inputs runs.
/// Inputs may be leaves or intermediate tensors; an input the output does not depend on is an
/// AutogradError unless allow_unused.
std::vector<Tensor> grad(const Tensor& output, const std::vector<Tensor>& inputs,
                         const GradOptions& options = {});
namespace detail {
/// What backward does with a leaf's gradient: the leaf's hooks, then .grad += grad under the leaf's
/// lock (.grad = grad when it has none), then its post-accumulate hooks. For a gradient computed
/// after its backward pass (DeferredWeightGrads::run).
void accumulate_grad(const Tensor& leaf, Tensor grad);
/// The leaf's hooks on a gradient for it (each may replace it), as backward runs them.
Tensor leaf_hooks(const Tensor& leaf, Tensor grad);
/// .grad += grad and the post-accumulate hooks, without the leaf's hooks (run before).
void add_to_grad(const Tensor& leaf, Tensor grad);
/// Runs fn as the end of a backward pass: hooks it fires may queue_callback(), and when fn
/// returns, `callbacks` and those run, in order (inside another backward they go to that one's
/// outermost task instead). If fn throws, `callbacks` keeps them all and nothing runs.
void run_as_backward_tail(const std::function<void()>& fn,
                          std::vector<std::function<void()>>& callbacks);
}  // namespace detail
}  // namespace autograd

/// Runs `fn` once the outermost backward pass of this thread has finished (after every gradient
/// is accumulated), as PyTorch's Engine::queue_callback. A backward started inside backward (from
/// a hook, or an activation-checkpoint recompute) hands its callbacks to the outer one, so
/// DistributedDataParallel's end-of-backward work runs once, at the very end. Only callable
/// during backward (from a hook); AutogradError otherwise.
void queue_callback(std::function<void()> fn);
/// Whether this thread is running part of a backward pass now (a node, a hook, a callback).
bool in_backward_pass();

/// Off: every node runs on the thread that called backward, one after another (the gradients are
/// the same bits either way). For comparisons and debugging; on by default.
void set_backward_device_threads(bool enabled);
bool backward_device_threads();

}  // namespace tandem
