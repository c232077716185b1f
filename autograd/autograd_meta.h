// autograd/autograd_meta.h — the autograd state of a tensor, behind TensorImpl::autograd. Core only
// forward-declares this struct, so core never depends on autograd.
#pragma once

#include <tandem/autograd/node.h>
#include <memory>
#include <mutex>

namespace tandem {

struct AutogradMeta {
  // Guards `grad` and `accumulator`: backward passes on several threads (or devices) may write the
  // same leaf's gradient at once; each accumulation takes this lock.
  std::mutex mutex;
  Tensor grad;                      // a leaf's accumulated gradient (or a retained one)
  std::shared_ptr<Node> grad_fn;    // the op that produced this tensor; null for leaves
  std::weak_ptr<Node> accumulator;  // leaves: their accumulator node, made on first use
  // Leaves only (a non-leaf's hooks live on its grad_fn): they outlive any one graph.
  HookList<TensorHook> hooks;                          // run before accumulation
  HookList<PostAccumulateHook> post_accumulate_hooks;  // run after .grad is updated
};

/// `t`'s autograd state, created on first use (safe when threads race to create it).
AutogradMeta& autograd_meta(const Tensor& t);
/// `t`'s autograd state, or nullptr when autograd never touched it.
AutogradMeta* autograd_meta_if(const Tensor& t);
/// The edge a gradient for `t` flows into: its grad_fn, its leaf accumulator, or none.
std::shared_ptr<Node> gradient_node(const Tensor& t);

}  // namespace tandem
