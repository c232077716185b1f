// autograd/ops/copy.cpp — copies and conversions: contiguous, clone, .to(device), .to(dtype).
// .to(device) is differentiable (the gradient is copied back to the source device), which is what
// lets a model whose parts live on different devices train as is.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

// y = copy of x (any layout, device or dtype)      dx = dy brought back to x's device and dtype
Tensor copied(const char* name, const Tensor& x, Device device, DType dtype) {
  Tensor y = detail::convert(x, device, dtype);
  if (!is_floating(dtype)) return y;  // an integer copy is the end of the graph
  return record(name, y, {x}, {},
                [from = x.device(), from_dtype = x.dtype()](const Tensor& dy, const NeedsGrad&,
                                                            const Saved&) -> Grads {
                  return {detail::convert(dy, from, from_dtype)};
                });
}

}  // namespace

Tensor Tensor::contiguous() const {
  return is_contiguous() ? *this : copied("contiguous", *this, device(), dtype());
}

Tensor Tensor::clone() const { return copied("clone", *this, device(), dtype()); }

Tensor Tensor::to(Device d) const {
  return d == device() ? *this : copied("to", *this, d, dtype());
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  if (!non_blocking) return to(d);
  cuda::NonBlockingCopies scope;
  return to(d);
}

Tensor Tensor::to(DType t) const {
  if (t == dtype()) return *this;
  TD_CHECK_DTYPE(is_floating(t) || !requires_grad() || !GradMode::is_enabled(),
                 "to: converting a tensor that requires grad to ", t,
                 " would cut the graph\n  hint: call detach() first if that is what you want");
  return copied("to", *this, device(), t);
}

Tensor Tensor::detach() const {
  Tensor d = detail::as_strided(*this, shape(), strides(), storage_offset());
  return d;  // shares storage (and so the version counter), no autograd history
}

}  // namespace tandem
