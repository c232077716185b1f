// autograd/ops/index.cpp — indexing along a dim: gather (and its scatter-add backward), topk, and
// multinomial sampling; tril/triu, which keep one side of a diagonal. The kernels work on the last
// dim of contiguous rows; another dim is moved last (and back) around them.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

// `t` with `dim` swapped with the last dim (a view; applying it twice restores the order). It is
// differentiable, so the input's graph runs through the swap and the contiguous copy after it.
Tensor swap_last(const Tensor& t, int64_t dim) {
  return t.dim() > 0 ? t.transpose(dim, t.dim() - 1) : t;
}

// out[..., j] = x[..., index[..., j]] along the last dim of contiguous tensors, and its backward
// (dx = 0, then dx[..., index[..., j]] += dy[..., j]).
Tensor gather_last(const char* op, const Tensor& x, const Tensor& index) {
  Tensor out = empty(index.shape(), x.options());
  if (out.numel() > 0) kernels(x.device()).gather(x, index, out);
  return record(op, out, {x}, {{"index", index}},
                [shape = x.shape()](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
                  Tensor dx = empty(shape, dy.options());
                  if (dx.numel() > 0)
                    kernels(dy.device()).scatter_add(s[0], detail::contiguous(dy), dx);
                  return {dx};
                });
}

}  // namespace

// y[i][j] = x[i][index[i][j]] along dim        dx[i][index[i][j]] += dy[i][j]
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_same_device("gather", {{"input", x}, {"index", index}});
  check_dtype("gather", "index", index, kInt64);
  dim = wrap_dim(dim, x.dim(), "gather");
  bool fits = index.dim() == x.dim();
  for (int64_t d = 0; fits && d < x.dim(); ++d) fits = d == dim || index.size(d) == x.size(d);
  TD_CHECK_SHAPE(fits, "gather: index ", index.shape(), " must have input ", x.shape(),
                 "'s shape in every dim but ", dim);
  const Tensor xl = swap_last(x, dim).contiguous();
  const Tensor il = detail::contiguous(swap_last(index.detach(), dim));
  return swap_last(gather_last("gather", xl, il), dim);
}

// The k largest (or smallest) along dim, in order, and where they were; values are differentiable
// (their gradient goes back to where they came from).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  dim = wrap_dim(dim, x.dim(), "topk");
  TD_CHECK_VALUE(k >= 0 && k <= (x.dim() ? x.size(dim) : 1), "topk: k = ", k,
                 " is out of range for dim ", dim, " of ", x.shape());
  const Tensor xl = swap_last(x, dim).contiguous();
  Shape shape = xl.shape();
  shape.back() = k;
  Tensor values = empty(shape, x.options()),
         indices = empty(shape, {.dtype = kInt64, .device = x.device()});
  if (values.numel() > 0) {
    NoGradGuard no_grad;
    kernels(x.device()).topk(xl.detach(), k, largest, values, indices);
  }
  // The values again through gather, so that they carry gather's backward.
  values = gather_last("topk", xl, indices);
  return {swap_last(values, dim), swap_last(indices.detach(), dim)};
}

// `num_samples` category indices per row of non-negative weights (the last dim), from the
// device's generator.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement) {
  check_floating("multinomial", "probs", probs);
  TD_CHECK_SHAPE(probs.dim() == 1 || probs.dim() == 2,
                 "multinomial: probs must be [N] or [B, N], not ", probs.shape());
  TD_CHECK_VALUE(num_samples >= 1, "multinomial: num_samples must be at least 1, not ",
                 num_samples);
  const Tensor p = detail::contiguous(probs.dim() == 1 ? probs.reshape({1, probs.size(0)}) : probs);
  TD_CHECK_VALUE(p.size(1) >= 1, "multinomial: probs has no categories");
  Tensor out = empty({p.size(0), num_samples}, {.dtype = kInt64, .device = probs.device()});
  const GeneratorState rng =
      reserve_random(probs.device(), uint64_t(p.size(0)) * uint64_t(num_samples));
  {
    NoGradGuard no_grad;
    kernels(probs.device()).multinomial(p.detach(), num_samples, replacement, rng, out);
  }
  return probs.dim() == 1 ? out.reshape({num_samples}) : out;
}

namespace {
// x where col − row is on the kept side of `diagonal` (at or below for tril), 0 elsewhere.
Tensor keep_side(const char* op, const Tensor& x, int64_t diagonal, bool lower) {
  TD_CHECK_SHAPE(x.dim() >= 2, op, ": input must have at least 2 dims, not ", x.shape());
  const TensorOptions idx{.dtype = kInt64, .device = x.device()};
  const Tensor rows = arange(double(x.size(-2)), idx).unsqueeze(1);
  const Tensor cols = arange(double(x.size(-1)), idx).unsqueeze(0);
  const Tensor offset = cols - rows;
  const Tensor keep = lower ? offset.le(double(diagonal)) : offset.ge(double(diagonal));
  return where(keep, x, zeros({}, x.options()));
}
}  // namespace

// x where col − row <= diagonal (tril) or >= diagonal (triu), 0 elsewhere, on the last two dims.
Tensor tril(const Tensor& x, int64_t diagonal) { return keep_side("tril", x, diagonal, true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return keep_side("triu", x, diagonal, false); }

}  // namespace tandem
