// autograd/tensor_autograd.cpp — the autograd methods of Tensor: requires_grad_, grad, backward and
// the hooks. Hooks on a leaf live on its accumulator node; hooks on a non-leaf on its grad_fn.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

Tensor& Tensor::requires_grad_(bool requires_grad) {
  TD_CHECK_AS(AutogradError, is_leaf(),
              "requires_grad_: only leaf tensors can change requires_grad; this one was "
              "produced by '",
              grad_fn_name(), "'\n  hint: use detach().requires_grad_() for a new leaf");
  TD_CHECK_DTYPE(!requires_grad || is_floating(dtype()),
                 "requires_grad_: only floating-point tensors can require "
                 "gradients, but this one is ",
                 describe(*this));
  impl().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* meta = autograd_meta_if(*this);
  return meta == nullptr || !meta->grad_fn;
}

Tensor Tensor::grad() const {
  AutogradMeta* meta = autograd_meta_if(*this);
  if (!meta) return Tensor();
  std::lock_guard lk(meta->mutex);  // a backward on another thread may be accumulating into it
  return meta->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    TD_CHECK_SHAPE(grad.shape() == shape(), "set_grad: gradient ", describe(grad),
                   " does not match the tensor ", describe(*this));
    check_same_device("set_grad", {{"tensor", *this}, {"grad", grad}});
    check_same_dtype("set_grad", {{"tensor", *this}, {"grad", grad}});
  }
  AutogradMeta& meta = autograd_meta(*this);
  std::lock_guard lk(meta.mutex);
  meta.grad = grad;
}

std::string Tensor::grad_fn_name() const {
  const AutogradMeta* meta = autograd_meta_if(*this);
  return meta && meta->grad_fn ? meta->grad_fn->name : "";
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward(*this, grad, retain_graph);
}

HookHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) const {
  TD_CHECK_AS(AutogradError, requires_grad(),
              "register_hook: the tensor does not require grad, so no gradient "
              "will reach the hook (",
              describe(*this), ")");
  if (is_leaf()) return autograd_meta(*this).hooks.add(std::move(fn));
  return autograd_meta(*this).grad_fn->pre_hooks.add(std::move(fn));
}

HookHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  TD_CHECK_AS(AutogradError, requires_grad() && is_leaf(),
              "register_post_accumulate_grad_hook: only leaf tensors "
              "that require grad accumulate a .grad (",
              describe(*this), ")");
  return autograd_meta(*this).post_accumulate_hooks.add(std::move(fn));
}

void Tensor::retain_grad() const {
  TD_CHECK_AS(AutogradError, requires_grad(), "retain_grad: the tensor does not require grad (",
              describe(*this), ")");
  if (is_leaf()) return;  // leaves keep .grad anyway
  // A weak reference: the hook lives on this tensor's own grad_fn, so a strong one would be a
  // cycle.
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  autograd_meta(*this).grad_fn->pre_hooks.add([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& meta = *impl->autograd_ptr.load(std::memory_order_acquire);
      std::lock_guard lk(meta.mutex);
      meta.grad = meta.grad.defined() ? raw::binary(BinaryOp::Add, meta.grad, g, "retain_grad")
                                      : detail::convert(g, g.device(), g.dtype());
    }
    return Tensor();
  });
}

}  // namespace tandem
