// autograd/ops/raw.cpp — the non-recording helpers of raw.h. reduce() maps any set of dims onto the
// two reduction kernels: trailing dims of a contiguous tensor are rows, leading dims are columns,
// and anything else is permuted (kept dims first) and made contiguous.
#include <tandem/autograd/ops/raw.h>
#include <tandem/core/tensor_checks.h>
#include <algorithm>
#include <cmath>

namespace tandem::raw {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_device(name, {{"self", a}, {"other", b}});
  check_same_dtype(name, {{"self", a}, {"other", b}});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, a.options());
  if (out.numel() == 0) return out;
  kernels(a.device())
      .binary(op, detail::expand_to(a, shape, name), detail::expand_to(b, shape, name), out);
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, double b, const char* name) {
  return binary(op, a, scalar_tensor(b, a.options()), name);
}

Tensor unary(UnaryOp op, const Tensor& x) {
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) kernels(x.device()).unary(op, x, y);
  return y;
}

Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  TD_CHECK_INDEX(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dimension list ",
                 dims, " names a dimension twice");
  return out;
}

Tensor reduce(ReduceOp op, const Tensor& x_in, const Shape& dims_in, bool keepdim) {
  const char* op_name = name(op);
  Tensor x = x_in;
  if (x.dtype() == DType::b8) x = detail::convert(x, x.device(), DType::i64);  // sum of a mask
  if (op == ReduceOp::Mean) check_floating(op_name, "input", x);
  const int64_t nd = x.dim();
  const Shape dims = normalize_dims(dims_in, nd, op_name);
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  Shape out_shape, kept_then_reduced;
  int64_t k = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[size_t(d)]) {
      k *= x.size(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(x.size(d));
      kept_then_reduced.push_back(d);
    }
  }
  for (int64_t d : dims) kept_then_reduced.push_back(d);
  Tensor out = empty(
      out_shape, {.dtype = op == ReduceOp::ArgMax ? DType::i64 : x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  const Kernels& kn = kernels(x.device());
  if (k == 0) {
    TD_CHECK_SHAPE(op == ReduceOp::Sum || op == ReduceOp::Mean, op_name,
                   ": cannot reduce over a dimension of size 0 (input shape ", x.shape(), ")");
    kn.fill(out, op == ReduceOp::Sum ? 0.0 : NAN);
    return out;
  }
  const auto nr = int64_t(dims.size());
  const bool trailing = nr == 0 || dims.front() == nd - nr;
  const bool leading = nr > 0 && dims.back() == nr - 1;
  if (x.is_contiguous() && trailing) {
    kn.reduce_rows(op, x, out);
  } else if (x.is_contiguous() && leading) {
    kn.reduce_cols(op, x, out);
  } else {
    kn.reduce_rows(op, detail::contiguous(detail::permute(x, kept_then_reduced)), out);
  }
  return out;
}

Tensor expand_reduced(const Tensor& dy, const Shape& shape, const Shape& dims, bool keepdim) {
  Shape kept = shape;
  for (int64_t d : normalize_dims(dims, int64_t(shape.size()), "backward")) kept[size_t(d)] = 1;
  Tensor g = detail::contiguous(dy);
  (void)keepdim;  // with or without keepdim, dy holds numel(kept) elements in the same order
  g = detail::as_strided(g, kept, contiguous_strides(kept), g.storage_offset());
  return detail::contiguous(detail::expand_to(g, shape, "backward"));
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  TD_INTERNAL_ASSERT(lead >= 0, "sum_to: ", grad.shape(), " -> ", shape);
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[size_t(d - lead)] == 1 && grad.size(d) != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? detail::contiguous(grad) : reduce(ReduceOp::Sum, grad, dims, false);
  return detail::as_strided(r, shape, contiguous_strides(shape), r.storage_offset());
}

}  // namespace tandem::raw
