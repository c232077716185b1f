// autograd/node.h — one recorded op in the graph: its backward function, the tensors it saved, and
// an edge to the node of each input. A leaf that requires grad gets an accumulator node (the only
// node kind that writes .grad). Each op has exactly one output, so hooks on a non-leaf tensor live
// on its node.
#pragma once

#include <tandem/autograd/hooks.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/core/tensor.h>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace tandem {

using Grads = std::vector<Tensor>;    // one per input; undefined where not needed
using NeedsGrad = std::vector<bool>;  // which inputs need a gradient (grad_input_mask)
using Saved = std::vector<Tensor>;    // the saved tensors, unpacked, in the order record() got them
using BackwardFn =
    std::function<Grads(const Tensor& dy, const NeedsGrad& need, const Saved& saved)>;
using TensorHook = std::function<Tensor(const Tensor& grad)>;
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;

/// The weight-gradient part of an op (the "W" of zero-bubble pipelines), recorded beside its
/// backward: fn(dy, operand) is the gradient of the op's input `input`, from the gradient of its
/// output as rows (its leading dims flattened: [n, last]) and its saved tensor `saved`. fn must be
/// additive over dim 0: for dy and operand concatenated along dim 0 it gives the sum of what it
/// gives for the parts, so the parts that several backward passes put off can be computed in one
/// call (deferred_weight_grads.h).
using WeightGradFn = Tensor (*)(const Tensor& dy, const Tensor& operand);
struct WeightGrad {
  size_t input = 0;
  size_t saved = 0;
  WeightGradFn fn = nullptr;  // null: the op has none
};

struct Node;

/// What each input of a node was at record time: where its gradient goes and what it must look
/// like.
struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

struct Node {
  const char* name = "";
  uint64_t sequence_nr = 0;  // creation order: later nodes run first in backward
  Device device;             // of the op's output: dy arrives here, and backward runs here
  void* stream = nullptr;    // CUDA: the forward's stream on `device`, where backward runs too
  BackwardFn backward;     // released after backward unless retain_graph (kept if nothing is saved)
  std::vector<Edge> next;  // one per input
  std::vector<SavedTensor> saved;
  HookList<TensorHook> pre_hooks;  // register_hook on the (non-leaf) output
  WeightGrad weight_grad;          // what a backward that defers weight gradients puts off
  Tensor leaf;                     // accumulator nodes only: the leaf whose .grad this node writes
  bool released = false;
  // Backward may give an undefined gradient for an input that is a leaf: that leaf gets nothing
  // from this op (a PyTorch Function returning None). fully_shard's unshard op is one: a
  // parameter's gradient reaches its shard later, through a reduce-scatter (parallel/fsdp).
  bool gradients_elsewhere = false;

  bool is_accumulator() const { return leaf.defined(); }
};

/// The next sequence number (thread-safe).
uint64_t next_sequence_nr();

}  // namespace tandem
