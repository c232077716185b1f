// autograd/engine.cpp — reverse-mode backward. Count each node's consumers, then run nodes whose
// gradients are complete, latest-recorded first; sum the gradients flowing into each node; let
// accumulator nodes (one per leaf) add into .grad and fire the post-accumulate hooks. Kernels
// write, the engine alone accumulates. Runs with grad mode off: there is no double backward.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/trace.h>
#include <queue>
#include <unordered_map>

namespace tandem {
namespace {

struct Later {  // max-heap on sequence_nr
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

Tensor sum_grads(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.shape(), a.options());
  kernels(a.device()).binary(BinaryOp::Add, a, b, out);
  return out;
}

void accumulate(Node& node, const Tensor& grad) {
  const Tensor& leaf = node.leaf;
  AutogradMeta& meta = autograd_meta(leaf);
  if (!meta.grad.defined()) {
    // Steal the buffer when nothing else holds it; otherwise copy, so .grad never aliases
    // another tensor (e.g. the dy an add passed through to both of its inputs).
    const bool sole = grad.is_contiguous() && grad.impl_ptr().use_count() == 1 &&
                      grad.impl().storage.use_count() == 1;
    meta.grad = sole ? grad : detail::convert(grad, grad.device(), grad.dtype());
  } else {
    Tensor g = meta.grad;
    TD_CHECK_SHAPE(g.shape() == grad.shape(), "backward: the existing .grad of a leaf has shape ",
                   g.shape(), " but the new gradient has shape ", grad.shape());
    if (!g.is_contiguous()) meta.grad = g = detail::contiguous(g);
    kernels(g.device()).add_scaled(g, detail::contiguous(grad), 1.0);
    detail::bump_version(g);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf);
}

void check_saved(const Node& node) {
  TD_CHECK_AS(
      AutogradError, !node.released, "backward through the graph a second time (at '", node.name,
      "'): its saved tensors were freed after the first backward\n"
      "  hint: pass retain_graph = true to the first backward() if you need to call it twice");
  for (const SavedVersion& s : node.saved) {
    const auto storage = s.storage.lock();
    TD_CHECK_AS(AutogradError, !storage || storage->version() == s.version, "backward of '",
                node.name,
                "': a tensor it saved was modified by an in-place op "
                "(version ",
                s.version, " at record time, ", storage ? storage->version() : 0,
                " now), so its gradient would be wrong\n  hint: use an out-of-place op, or clone() "
                "the tensor before modifying it");
  }
}

// Callbacks queued during the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

}  // namespace

void queue_callback(std::function<void()> fn) {
  TD_CHECK_AS(AutogradError, t_callbacks != nullptr,
              "queue_callback: no backward pass is running on this thread (call it from a hook)");
  t_callbacks->push_back(std::move(fn));
}

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  TD_CHECK_AS(AutogradError, root.requires_grad(),
              "backward: the tensor does not require grad and has no grad_fn\n  hint: call "
              "requires_grad_() on the parameters before the forward pass, and do not run it "
              "under NoGradGuard");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    TD_CHECK_SHAPE(root.numel() == 1,
                   "backward: a gradient can be created implicitly only for a "
                   "one-element output, but the output has shape ",
                   root.shape(),
                   "\n  hint: reduce it first (loss.sum() or loss.mean()), or pass a gradient");
    grad = ones(root.shape(), root.options());
  }
  TD_CHECK_SHAPE(grad.shape() == root.shape(), "backward: gradient shape ", grad.shape(),
                 " does not match the output shape ", root.shape());
  NoGradGuard no_grad;
  std::shared_ptr<Node> start = gradient_node(root);
  std::vector<std::function<void()>> callbacks;
  auto* outer = t_callbacks;  // a backward inside a callback or hook keeps its own list
  t_callbacks = &callbacks;
  struct Restore {
    std::vector<std::function<void()>>** slot;
    std::vector<std::function<void()>>* value;
    ~Restore() { *slot = value; }
  } restore{&t_callbacks, outer};

  // 1. Count, for every node reachable from the root, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.get()};
  deps[start.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      if (deps[e.node.get()]++ == 0) stack.push_back(e.node.get());
    }
  }

  // 2. Run nodes whose inputs are complete.
  std::unordered_map<Node*, Tensor> buffers;
  buffers[start.get()] = grad;
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  ready.push(start.get());
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor dy = std::move(buffers[node]);
    buffers.erase(node);
    auto& hooks = node->is_accumulator() ? autograd_meta(node->leaf).hooks : node->pre_hooks;
    for (auto& hook : hooks) {
      Tensor replaced = hook(dy);
      if (replaced.defined()) dy = replaced;
    }
    if (node->is_accumulator()) {
      accumulate(*node, dy);
      continue;
    }
    check_saved(*node);
    NeedsGrad need(node->next.size());
    for (size_t i = 0; i < need.size(); ++i) need[i] = node->next[i].node != nullptr;
    const int64_t t0 = trace::enabled() ? trace::now_us() : -1;  // a span per op when tracing
    Grads grads = node->backward(detail::contiguous(dy), need);
    if (t0 >= 0) trace::record(node->name, "backward", t0, trace::now_us());
    TD_INTERNAL_ASSERT(grads.size() == node->next.size(), "backward of '", node->name,
                       "' returned ", grads.size(), " gradients for ", node->next.size(),
                       " inputs");
    if (!retain_graph) {
      node->backward = nullptr;  // frees the saved tensors now, not when the graph dies
      node->released = true;
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next[i];
      if (!e.node) continue;
      Tensor& g = grads[i];
      TD_INTERNAL_ASSERT(g.defined(), "backward of '", node->name, "' gave no gradient for input ",
                         i);
      TD_INTERNAL_ASSERT(g.shape() == e.shape && g.dtype() == e.dtype && g.device() == e.device,
                         "backward of '", node->name, "': gradient for input ", i, " is ",
                         g.shape(), " ", g.dtype(), " on ", g.device(), ", expected ", e.shape, " ",
                         e.dtype, " on ", e.device);
      Tensor& buf = buffers[e.node.get()];
      buf = buf.defined() ? sum_grads(buf, g) : std::move(g);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  // Callbacks may queue more callbacks (run in order); an exception ends backward with it.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    auto fn = std::move(callbacks[i]);  // the vector may grow while fn runs
    fn();
  }
}

}  // namespace tandem
