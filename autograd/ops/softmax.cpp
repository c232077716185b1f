// autograd/ops/softmax.cpp — softmax and log_softmax over any dim. The kernels work on the last
// dim of a contiguous [M, K]; another dim is moved last (and back) around them.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

// Swaps `dim` with the last dim (a view); applying it twice restores the order.
Tensor swap_last(const Tensor& t, int64_t dim) {
  Shape order;
  for (int64_t d = 0; d < t.dim(); ++d) order.push_back(d);
  if (t.dim() > 0) std::swap(order[size_t(dim)], order.back());
  return detail::permute(t, order);
}

using KernelFn = void (*const Kernels::*)(const Tensor&, Tensor&);
using BackwardKernelFn = void (*const Kernels::*)(const Tensor&, const Tensor&, Tensor&);

// softmax:      y = eˣ⁻ᵐᵃˣ / Σ eˣ⁻ᵐᵃˣ      dx = y·(dy − Σ dy·y)
// log_softmax:  y = x − max − log Σ eˣ⁻ᵐᵃˣ  dx = dy − eʸ·Σ dy
Tensor softmax_like(const char* name, KernelFn forward, BackwardKernelFn backward, const Tensor& x,
                    int64_t dim) {
  check_floating(name, "input", x);
  dim = wrap_dim(dim, x.dim(), name);
  const Kernels& k = kernels(x.device());
  Tensor xl = detail::contiguous(swap_last(x, dim));
  Tensor yl = empty_like(xl);
  if (yl.numel() > 0) (k.*forward)(xl, yl);
  Tensor y = detail::contiguous(swap_last(yl, dim));
  return record(name, y, {x}, {{"result", y}},
                [dim, backward](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  const Tensor& y = s[0];
                  Tensor yl = detail::contiguous(swap_last(y, dim)),
                         dyl = detail::contiguous(swap_last(dy, dim));
                  Tensor dxl = empty_like(yl);
                  if (dxl.numel() > 0) (kernels(y.device()).*backward)(yl, dyl, dxl);
                  return {detail::contiguous(swap_last(dxl, dim))};
                });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (auto c = autocast::float32({x})) return softmax((*c)[0], dim);
  return softmax_like("softmax", &Kernels::softmax_forward, &Kernels::softmax_backward, x, dim);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (auto c = autocast::float32({x})) return log_softmax((*c)[0], dim);
  return softmax_like("log_softmax", &Kernels::log_softmax_forward, &Kernels::log_softmax_backward,
                      x, dim);
}

Tensor Tensor::softmax(int64_t dim) const { return tandem::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return tandem::log_softmax(*this, dim); }

}  // namespace tandem
