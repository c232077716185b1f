// autograd/ops/linear.cpp — the fully connected layer's op: one GEMM against the transposed
// weight plus a broadcast bias, and a backward of two GEMMs and a column sum.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

// dW = dyᵀ·x, the leading dims of dy flattened into rows as x's were (x: [n, in]). A sum over
// rows, so it is also the weight-gradient part a backward may put off (record()'s WeightGrad):
// over several backward passes' rows concatenated, it is one product.
Tensor linear_weight_grad(const Tensor& dy_in, const Tensor& x) {
  const Tensor dy = detail::contiguous(dy_in);
  const int64_t out = dy.size(-1);
  const Tensor dy2 = detail::as_strided(dy, {x.size(0), out}, {out, 1}, dy.storage_offset());
  Tensor dw = empty({out, x.size(1)}, dy.options());
  kernels(dy.device()).gemm(dy2, x, dw, /*trans_a=*/true, /*trans_b=*/false);
  return dw;
}

}  // namespace

// y = x·Wᵀ + b        x:[N,in]  W:[out,in]  b:[out]  ->  y:[N,out]   (leading dims of x flatten
// into N)
Tensor linear(const Tensor& x_in, const Tensor& w, const Tensor& b) {
  if (auto c = autocast::lower_precision({x_in, w, b})) return linear((*c)[0], (*c)[1], (*c)[2]);
  check_same_device("linear", {{"input", x_in}, {"weight", w}, {"bias", b}});
  check_same_dtype("linear", {{"input", x_in}, {"weight", w}, {"bias", b}});
  check_floating("linear", "input", x_in);
  TD_CHECK_SHAPE(x_in.dim() >= 1 && w.dim() == 2 && x_in.size(-1) == w.size(1), "linear: input ",
                 x_in.shape(), " cannot be multiplied by weight ", w.shape(),
                 "; expected input [N, ", w.dim() == 2 ? w.size(1) : -1, "]");
  TD_CHECK_SHAPE(!b.defined() || (b.dim() == 1 && b.size(0) == w.size(0)), "linear: bias ",
                 b.shape(), " does not match weight ", w.shape(), "; expected [", w.size(0), "]");
  const Shape out_shape = [&] {
    Shape s = x_in.shape();
    s.back() = w.size(0);
    return s;
  }();
  const int64_t n = x_in.numel() / std::max<int64_t>(x_in.size(-1), 1), in = w.size(1),
                out = w.size(0);
  const Tensor xc = detail::contiguous(x_in);  // may be a view with an offset (a batch slice)
  const Tensor x = detail::as_strided(xc, {n, in}, {in, 1}, xc.storage_offset());
  const Kernels& k = kernels(x.device());
  Tensor y = empty({n, out}, x.options());
  k.gemm(x, detail::contiguous(w), y, /*trans_a=*/false, /*trans_b=*/true);  // y = x·Wᵀ
  if (b.defined())
    k.binary(BinaryOp::Add, y, detail::expand_to(b, y.shape(), "linear"), y);  // y += b
  y = detail::as_strided(y, out_shape, contiguous_strides(out_shape), 0);

  return record(
      "linear", y, {x_in, w, b}, {{"input", x}, {"weight", w}},
      [in_shape = x_in.shape(), n, out](const Tensor& dy_in, const NeedsGrad& need,
                                        const Saved& s) -> Grads {
        const Tensor &x = s[0], &w = s[1];
        const Kernels& k = kernels(dy_in.device());
        const Tensor dy = detail::as_strided(dy_in, {n, out}, {out, 1}, dy_in.storage_offset());
        Grads g(3);
        if (need[0]) {  // dx = dy·W
          Tensor dx = empty({n, w.size(1)}, dy.options());
          k.gemm(dy, detail::contiguous(w), dx, false, false);
          g[0] = detail::as_strided(dx, in_shape, contiguous_strides(in_shape), 0);
        }
        if (need[1]) g[1] = linear_weight_grad(dy, x);  // dW = dyᵀ·x
        if (need[2]) {                                  // db = Σ_N dy
          g[2] = empty({out}, dy.options());
          k.reduce_cols(ReduceOp::Sum, dy, g[2]);
        }
        return g;
      },
      WeightGrad{.input = 1, .saved = 0, .fn = linear_weight_grad});
}

}  // namespace tandem
