// autograd/ops/reduce.cpp — sum, mean, amax/amin and argmax over any dims, with keepdim.
// Backward broadcasts dy back over the reduced dims; max/min share it among tied maxima (as
// torch.amax does), so the gradient is well defined even on ties.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {

// y = max/min over dims      dx = dy · [x = y] / (number of ties)
Tensor extremum(ReduceOp op, const char* name, const Tensor& x, const Shape& dims, bool keepdim) {
  TD_CHECK_SHAPE(x.numel() > 0, name, ": cannot reduce an empty tensor of shape ", x.shape());
  Tensor y = raw::reduce(op, x, dims, keepdim);
  return record(
      name, y, {x}, {{"self", x}, {"result", y}},
      [dims, keepdim](const Tensor& dy, const NeedsGrad&, const Saved& s) -> Grads {
        const Tensor &x = s[0], &y = s[1];
        const Kernels& k = kernels(x.device());
        Tensor y_full = raw::expand_reduced(y, x.shape(), dims, keepdim);
        Tensor hit = empty(x.shape(), {.dtype = DType::b8, .device = x.device()});
        k.compare(CompareOp::Eq, x, y_full, hit);
        Tensor mask = detail::convert(hit, x.device(), x.dtype());
        Tensor count = raw::expand_reduced(raw::reduce(ReduceOp::Sum, mask, dims, keepdim),
                                           x.shape(), dims, keepdim);
        Tensor share = raw::binary(BinaryOp::Div, mask, count, "max_backward");
        return {raw::binary(BinaryOp::Mul, share, raw::expand_reduced(dy, x.shape(), dims, keepdim),
                            "max_backward")};
      });
}

}  // namespace

// y = Σ x over dims          dx = dy broadcast back
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  if (auto c = autocast::float32({x})) return sum((*c)[0], dims, keepdim);
  Tensor y = raw::reduce(ReduceOp::Sum, x, dims, keepdim);
  return record("sum", y, {x}, {},
                [shape = x.shape(), dims, keepdim](const Tensor& dy, const NeedsGrad&, const Saved&)
                    -> Grads { return {raw::expand_reduced(dy, shape, dims, keepdim)}; });
}

// y = Σ x / K over dims      dx = dy / K broadcast back
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  if (auto c = autocast::float32({x})) return mean((*c)[0], dims, keepdim);
  Tensor y = raw::reduce(ReduceOp::Mean, x, dims, keepdim);
  return record(
      "mean", y, {x}, {},
      [shape = x.shape(), dims, keepdim, count = x.numel() / std::max<int64_t>(y.numel(), 1)](
          const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
        return {raw::binary(BinaryOp::Div, raw::expand_reduced(dy, shape, dims, keepdim),
                            double(count), "mean_backward")};
      });
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(ReduceOp::Max, "max", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return extremum(ReduceOp::Min, "min", x, dims, keepdim);
}

// Index of the first maximum along dim (int64; no gradient).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  TD_CHECK_SHAPE(x.numel() > 0, "argmax: cannot reduce an empty tensor of shape ", x.shape());
  return raw::reduce(ReduceOp::ArgMax, x, {wrap_dim(dim, x.dim(), "argmax")}, keepdim);
}

Tensor Tensor::sum() const { return tandem::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const {
  return tandem::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return tandem::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const {
  return tandem::mean(*this, dims, keepdim);
}
Tensor Tensor::max() const { return amax(*this); }
Tensor Tensor::max(int64_t dim, bool keepdim) const { return amax(*this, {dim}, keepdim); }
Tensor Tensor::min() const { return amin(*this); }
Tensor Tensor::min(int64_t dim, bool keepdim) const { return amin(*this, {dim}, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return tandem::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmax() const { return tandem::argmax(reshape({-1}), 0); }

}  // namespace tandem
