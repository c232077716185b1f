// autograd/ops/conv.cpp — 2-D convolution (NCHW): checks, forward kernel, and a backward that asks
// the kernel only for the gradients that are needed (the input of the first layer needs none).
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {

// y[n, o] = b[o] + Σ_c Σ_ij w[o, c, i, j] · x[n, g(o)·C/g + c, oy·s − p + i·d, ox·s − p + j·d]
Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b, const Conv2dParams& p) {
  if (auto c = autocast::lower_precision({x_in, w_in, b}))
    return conv2d((*c)[0], (*c)[1], (*c)[2], p);
  check_same_device("conv2d", {{"input", x_in}, {"weight", w_in}, {"bias", b}});
  check_same_dtype("conv2d", {{"input", x_in}, {"weight", w_in}, {"bias", b}});
  check_floating("conv2d", "input", x_in);
  check_dim("conv2d", "input", x_in, 4, "[N, C, H, W]");
  check_dim("conv2d", "weight", w_in, 4, "[C_out, C_in / groups, kH, kW]");
  TD_CHECK_VALUE(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 &&
                     p.dilation_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
                 "conv2d: stride, dilation and groups must be >= 1 and padding >= 0");
  TD_CHECK_SHAPE(x_in.size(1) == w_in.size(1) * p.groups && w_in.size(0) % p.groups == 0,
                 "conv2d: input ", x_in.shape(), " has ", x_in.size(1), " channels, but weight ",
                 w_in.shape(), " with groups=", p.groups, " expects ", w_in.size(1) * p.groups);
  TD_CHECK_SHAPE(!b.defined() || (b.dim() == 1 && b.size(0) == w_in.size(0)), "conv2d: bias ",
                 b.shape(), " does not match weight ", w_in.shape(), "; expected [", w_in.size(0),
                 "]");
  // The span left after the first window, checked before dividing: C++ division truncates toward
  // zero, so a negative span over a stride > 1 would otherwise become one output row.
  const int64_t span_h = x_in.size(2) + 2 * p.pad_h - p.dilation_h * (w_in.size(2) - 1) - 1;
  const int64_t span_w = x_in.size(3) + 2 * p.pad_w - p.dilation_w * (w_in.size(3) - 1) - 1;
  TD_CHECK_SHAPE(span_h >= 0 && span_w >= 0, "conv2d: input ", x_in.shape(),
                 " is smaller than the (dilated) kernel ", w_in.shape(), " with padding ", p.pad_h,
                 "x", p.pad_w);
  const int64_t ho = span_h / p.stride_h + 1, wo = span_w / p.stride_w + 1;
  const Tensor x = detail::contiguous(x_in), w = detail::contiguous(w_in);
  Tensor y = empty({x.size(0), w.size(0), ho, wo}, x.options());
  if (y.numel() > 0)
    kernels(x.device()).conv2d_forward(x, w, b.defined() ? detail::contiguous(b) : b, y, p);

  return record("conv2d", y, {x_in, w_in, b}, {{"input", x}, {"weight", w}},
                [p](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
                  const Tensor &x = s[0], &w = s[1];
                  Grads g(3);
                  if (need[0]) g[0] = empty_like(x);                     // dx = col2im(Wᵀ·dY)
                  if (need[1]) g[1] = empty_like(w);                     // dW = dY·colsᵀ
                  if (need[2]) g[2] = empty({w.size(0)}, dy.options());  // db = Σ_{n,y,x} dy
                  if (dy.numel() > 0) {
                    kernels(dy.device()).conv2d_backward(x, w, dy, g[0], g[1], g[2], p);
                  } else {  // an empty batch: every gradient is an empty sum
                    for (Tensor& t : g)
                      if (t.defined() && t.numel() > 0) kernels(t.device()).fill(t, 0.0);
                  }
                  return g;
                });
}

}  // namespace tandem
