// autograd/ops/compare.cpp — comparisons (bool results, never differentiable) and where(), which
// is differentiable in its two value inputs: each gets dy where it was chosen, 0 elsewhere.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* op_name = name(op);
  check_same_device(op_name, {{"self", a}, {"other", b}});
  check_same_dtype(op_name, {{"self", a}, {"other", b}});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name);
  Tensor out = empty(shape, {.dtype = DType::b8, .device = a.device()});
  if (out.numel() > 0)
    kernels(a.device())
        .compare(op, detail::expand_to(a, shape, op_name), detail::expand_to(b, shape, op_name),
                 out);
  return out;
}

Tensor scalar_like(double v, const Tensor& t) { return scalar_tensor(v, t.options()); }

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareOp::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return compare(CompareOp::Eq, a, scalar_like(b, a)); }
Tensor ne(const Tensor& a, double b) { return compare(CompareOp::Ne, a, scalar_like(b, a)); }
Tensor lt(const Tensor& a, double b) { return compare(CompareOp::Lt, a, scalar_like(b, a)); }
Tensor le(const Tensor& a, double b) { return compare(CompareOp::Le, a, scalar_like(b, a)); }
Tensor gt(const Tensor& a, double b) { return compare(CompareOp::Gt, a, scalar_like(b, a)); }
Tensor ge(const Tensor& a, double b) { return compare(CompareOp::Ge, a, scalar_like(b, a)); }

// y = cond ? a : b           da = cond ? dy : 0      db = cond ? 0 : dy
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (auto c = autocast::promote({a, b})) return where(cond, (*c)[0], (*c)[1]);
  check_dtype("where", "condition", cond, DType::b8);
  check_same_device("where", {{"condition", cond}, {"self", a}, {"other", b}});
  check_same_dtype("where", {{"self", a}, {"other", b}});
  const Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor y = empty(shape, a.options());
  if (y.numel() > 0)
    kernels(a.device())
        .where(detail::expand_to(cond, shape, "where"), detail::expand_to(a, shape, "where"),
               detail::expand_to(b, shape, "where"), y);
  return record("where", y, {a, b}, {{"condition", cond}},
                [sa = a.shape(), sb = b.shape()](const Tensor& dy, const NeedsGrad& need,
                                                 const Saved& s) -> Grads {
                  const Kernels& k = kernels(dy.device());
                  const Tensor c = detail::expand_to(s[0], dy.shape(), "where_backward");
                  const Tensor zero =
                      detail::expand_to(zeros({}, dy.options()), dy.shape(), "where_backward");
                  Grads g(2);
                  if (need[0]) {
                    Tensor da = empty_like(dy);
                    k.where(c, dy, zero, da);
                    g[0] = raw::sum_to(da, sa);
                  }
                  if (need[1]) {
                    Tensor db = empty_like(dy);
                    k.where(c, zero, dy, db);
                    g[1] = raw::sum_to(db, sb);
                  }
                  return g;
                });
}

Tensor Tensor::eq(const Tensor& other) const { return tandem::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return tandem::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return tandem::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return tandem::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return tandem::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return tandem::ge(*this, other); }
Tensor Tensor::eq(double other) const { return tandem::eq(*this, other); }
Tensor Tensor::ne(double other) const { return tandem::ne(*this, other); }
Tensor Tensor::lt(double other) const { return tandem::lt(*this, other); }
Tensor Tensor::le(double other) const { return tandem::le(*this, other); }
Tensor Tensor::gt(double other) const { return tandem::gt(*this, other); }
Tensor Tensor::ge(double other) const { return tandem::ge(*this, other); }

}  // namespace tandem
