// autograd/accumulate_grad.cpp — how a leaf's .grad is written: the one place that adds into it
// (kernels write, the engine accumulates), under the leaf's lock, then the post-accumulate hooks.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/engine.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

void autograd::detail::add_to_grad(const Tensor& leaf, Tensor grad) {
  AutogradMeta& meta = autograd_meta(leaf);
  {
    std::lock_guard lk(meta.mutex);  // another backward (thread, device) may write it too
    if (!meta.grad.defined()) {
      // Steal the buffer when nothing else holds it; otherwise copy, so .grad never aliases
      // another tensor (e.g. the dy an add passed through to both of its inputs).
      const bool sole = grad.is_contiguous() && grad.impl_ptr().use_count() == 1 &&
                        grad.impl().storage.use_count() == 1;
      meta.grad =
          sole ? std::move(grad) : tandem::detail::convert(grad, grad.device(), grad.dtype());
    } else {
      Tensor g = meta.grad;
      TD_CHECK_SHAPE(g.shape() == grad.shape(), "backward: the existing .grad of a leaf has shape ",
                     g.shape(), " but the new gradient has shape ", grad.shape());
      if (!g.is_contiguous()) meta.grad = g = tandem::detail::contiguous(g);
      kernels(g.device()).add_scaled(g, tandem::detail::contiguous(grad), 1.0);
      tandem::detail::bump_version(g);
    }
  }
  for (auto& hook : meta.post_accumulate_hooks.snapshot()) hook(leaf);
}

Tensor autograd::detail::leaf_hooks(const Tensor& leaf, Tensor grad) {
  for (auto& hook : autograd_meta(leaf).hooks.snapshot()) {
    Tensor replaced = hook(grad);
    if (replaced.defined()) grad = replaced;
  }
  return grad;
}

void autograd::detail::accumulate_grad(const Tensor& leaf, Tensor grad) {
  add_to_grad(leaf, leaf_hooks(leaf, std::move(grad)));
}

}  // namespace tandem
