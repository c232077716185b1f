// autograd/ops/matmul.cpp — torch.matmul: 1-D operands are promoted (and the extra dim removed
// afterwards), 2-D is one GEMM, and ≥3-D broadcasts the batch dims. A transposed 2-D operand
// (x.matmul(w.t()), as in a linear layer) is passed to GEMM as its contiguous base with a
// transpose flag instead of being copied.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

struct GemmOperand {
  Tensor base;  // contiguous
  bool trans;   // op(base) is the operand
};

// A 2-D operand as a contiguous tensor plus transpose flag, copying only when neither fits.
GemmOperand gemm_operand(const Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  if (t.stride(0) == 1 && t.stride(1) == t.size(0))
    return {detail::as_strided(t, {t.size(1), t.size(0)}, {t.size(0), 1}, t.storage_offset()),
            true};
  return {detail::contiguous(t), false};
}

// c = a·b for 2-D a [M,K], b [K,N].
Tensor mm(const Tensor& a, const Tensor& b) {
  const GemmOperand ga = gemm_operand(a), gb = gemm_operand(b);
  Tensor c = empty({a.size(0), b.size(1)}, a.options());
  kernels(a.device()).gemm(ga.base, gb.base, c, ga.trans, gb.trans);
  return c;
}

// Batched c = a·b with a [..., M, K], b [..., K, N] broadcast over batch `batch`.
Tensor bmm(const Tensor& a, const Tensor& b, const Shape& batch) {
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1), nb = numel(batch);
  auto flat3 = [&](const Tensor& t, int64_t r, int64_t c) {
    if (t.dim() == 2) return detail::contiguous(t);  // shared by every batch entry
    Shape full = batch;
    full.push_back(r);
    full.push_back(c);
    Tensor e = detail::contiguous(detail::expand_to(t, full, "matmul"));
    return detail::as_strided(e, {nb, r, c}, contiguous_strides({nb, r, c}), e.storage_offset());
  };
  Tensor c = empty({nb, m, n}, a.options());
  kernels(a.device()).gemm(flat3(a, m, k), flat3(b, k, n), c, false, false);
  Shape out = batch;
  out.push_back(m);
  out.push_back(n);
  return detail::as_strided(c, out, contiguous_strides(out), 0);
}

// Batched c = op(a)·op(b) on plain (non-broadcast) [B?, R, C] tensors, for the backward.
Tensor gemm3(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t m = ta ? a.size(-1) : a.size(-2), n = tb ? b.size(-2) : b.size(-1);
  Shape shape = a.dim() == 3   ? Shape{a.size(0), m, n}
                : b.dim() == 3 ? Shape{b.size(0), m, n}
                               : Shape{m, n};
  Tensor c = empty(shape, a.options());
  kernels(a.device()).gemm(detail::contiguous(a), detail::contiguous(b), c, ta, tb);
  return c;
}

Tensor flatten_batch(const Tensor& t) {  // [..., R, C] -> [B, R, C] (contiguous)
  Tensor c = detail::contiguous(t);
  const int64_t r = t.size(-2), cols = t.size(-1);
  return detail::as_strided(
      c, {t.numel() / std::max<int64_t>(r * cols, 1), r, cols},
      contiguous_strides({t.numel() / std::max<int64_t>(r * cols, 1), r, cols}),
      c.storage_offset());
}

}  // namespace

// y = a·b            da = dy·bᵀ (summed over broadcast batch dims)     db = aᵀ·dy
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (auto c = autocast::lower_precision({a, b})) return matmul((*c)[0], (*c)[1]);
  check_same_device("matmul", {{"self", a}, {"other", b}});
  check_same_dtype("matmul", {{"self", a}, {"other", b}});
  check_floating("matmul", "self", a);
  TD_CHECK_SHAPE(a.dim() >= 1 && b.dim() >= 1,
                 "matmul: both operands need at least 1 dimension, but got ", a.shape(), " and ",
                 b.shape());
  if (a.dim() == 1 && b.dim() == 1) return matmul(a.unsqueeze(0), b.unsqueeze(-1)).reshape({});
  if (a.dim() == 1) return matmul(a.unsqueeze(0), b).squeeze(-2);
  if (b.dim() == 1) return matmul(a, b.unsqueeze(-1)).squeeze(-1);
  TD_CHECK_SHAPE(a.size(-1) == b.size(-2), "matmul: self ", a.shape(),
                 " cannot be multiplied by other ", b.shape(), "; expected other [..., ",
                 a.size(-1), ", N]");
  Shape batch;
  if (a.dim() > 2 || b.dim() > 2) {
    batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                             Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  }
  Tensor y = batch.empty() ? mm(a, b) : bmm(a, b, batch);
  return record("matmul", y, {a, b}, {{"self", a}, {"other", b}},
                [batch](const Tensor& dy, const NeedsGrad& need, const Saved& s) -> Grads {
                  const Tensor &a = s[0], &b = s[1];
                  Grads g(2);
                  if (batch.empty()) {  // 2-D: da = dy·bᵀ [M,K], db = aᵀ·dy [K,N]
                    if (need[0]) g[0] = mm(dy, detail::permute(b, {1, 0}));
                    if (need[1]) g[1] = mm(detail::permute(a, {1, 0}), dy);
                    return g;
                  }
                  // Batched: work on [B, R, C] (a 2-D operand stays shared), then sum the broadcast
                  // batch dims back to each input's shape.
                  auto full = [&](int64_t r, int64_t c) {
                    Shape s = batch;
                    s.push_back(r);
                    s.push_back(c);
                    return s;
                  };
                  auto as3 = [&](const Tensor& t, int64_t r, int64_t c) {
                    return t.dim() == 2 ? detail::contiguous(t)
                                        : flatten_batch(detail::expand_to(t, full(r, c), "matmul"));
                  };
                  auto unflatten = [&](const Tensor& t3, const Shape& shape) {
                    return detail::as_strided(t3, shape, contiguous_strides(shape), 0);
                  };
                  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
                  const Tensor dy3 = flatten_batch(dy);
                  if (need[0])
                    g[0] = raw::sum_to(unflatten(gemm3(dy3, as3(b, k, n), false, true), full(m, k)),
                                       a.shape());
                  if (need[1])
                    g[1] = raw::sum_to(unflatten(gemm3(as3(a, m, k), dy3, true, false), full(k, n)),
                                       b.shape());
                  return g;
                });
}

Tensor Tensor::matmul(const Tensor& other) const { return tandem::matmul(*this, other); }

}  // namespace tandem
