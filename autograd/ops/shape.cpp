// autograd/ops/shape.cpp — views: reshape, transpose, permute, narrow, select, squeeze, unsqueeze,
// expand. Each shares the input's storage; each backward maps dy back onto the input's shape.
#include <tandem/autograd/ops/raw.h>
#include <tandem/autograd/record.h>
#include <tandem/core/tensor_checks.h>
#include <algorithm>

namespace tandem {
namespace {

// Views whose backward is "reshape dy to the input's shape" (reshape, flatten, squeeze, ...).
Tensor reshaped(const char* name, const Tensor& x, const Tensor& y) {
  return record(
      name, y, {x}, {},
      [shape = x.shape()](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
        Tensor c = detail::contiguous(dy);
        return {detail::as_strided(c, shape, contiguous_strides(shape), c.storage_offset())};
      });
}

// Inverse of a permutation.
Shape inverse(const Shape& perm) {
  Shape inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  return inv;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  const Shape s = detail::infer_shape(shape, numel(), "view");
  const auto st = detail::view_strides(this->shape(), strides(), s);
  TD_CHECK_SHAPE(st.has_value(), "view: shape ", shape,
                 " is not compatible with the input's layout (shape ", this->shape(), ", strides ",
                 strides(), ")\n  hint: use reshape(), which copies when needed");
  return reshaped("view", *this, detail::as_strided(*this, s, *st, storage_offset()));
}

Tensor Tensor::reshape(const Shape& shape) const {
  const Shape s = detail::infer_shape(shape, numel(), "reshape");
  if (const auto st = detail::view_strides(this->shape(), strides(), s))
    return reshaped("reshape", *this, detail::as_strided(*this, s, *st, storage_offset()));
  const Tensor c = detail::contiguous(*this);  // not expressible as a view: copy once
  return reshaped("reshape", *this, detail::as_strided(c, s, contiguous_strides(s), 0));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  end_dim = wrap_dim(end_dim, dim(), "flatten");
  TD_CHECK_INDEX(start_dim <= end_dim, "flatten: start_dim ", start_dim, " is after end_dim ",
                 end_dim);
  Shape s(shape().begin(), shape().begin() + start_dim);
  s.push_back(-1);
  s.insert(s.end(), shape().begin() + end_dim + 1, shape().end());
  if (numel() == 0) s[size_t(start_dim)] = 0;
  return reshape(s);
}

Tensor Tensor::permute(const Shape& dims) const {
  TD_CHECK_SHAPE(int64_t(dims.size()) == dim(), "permute: got ", dims.size(), " dims ", dims,
                 " for a tensor with ", dim(), " dimensions");
  Shape perm;
  for (int64_t d : dims) perm.push_back(wrap_dim(d, dim(), "permute"));
  Shape sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  TD_CHECK_INDEX(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                 "permute: ", dims, " repeats a dimension");
  Tensor y = detail::permute(*this, perm);
  // y = permute(x, p)       dx = permute(dy, p⁻¹)
  return record("permute", y, {*this}, {},
                [inv = inverse(perm)](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {detail::permute(dy, inv)};
                });
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Shape perm;
  for (int64_t d = 0; d < dim(); ++d) perm.push_back(d);
  if (dim() > 0)
    std::swap(perm[size_t(wrap_dim(dim0, dim(), "transpose"))],
              perm[size_t(wrap_dim(dim1, dim(), "transpose"))]);
  return permute(perm);
}

Tensor Tensor::t() const {
  TD_CHECK_SHAPE(dim() <= 2, "t: expects a tensor with at most 2 dimensions, but got shape ",
                 shape(), "\n  hint: use transpose(dim0, dim1)");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t size = this->size(d);
  if (start < 0) start += size;
  TD_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= size, "narrow: range [", start,
                 ", ", start + length, ") is out of bounds for dimension ", d, " of size ", size,
                 " (shape ", shape(), ")");
  Shape s = shape();
  s[size_t(d)] = length;
  Tensor y = detail::as_strided(*this, s, strides(), storage_offset() + start * stride(d));
  // y = x[..., start:start+length, ...]     dx = zeros with dy written into that slice
  return record(
      "narrow", y, {*this}, {},
      [shape = shape(), d, start](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
        Tensor dx = zeros(shape, dy.options());
        Tensor slice =
            detail::as_strided(dx, dy.shape(), dx.strides(), start * dx.strides()[size_t(d)]);
        kernels(dx.device()).copy(dy, slice);
        return {dx};
      });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  TD_CHECK_INDEX(dim() > 0, "select: cannot select on a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t size = this->size(d);
  TD_CHECK_INDEX(index >= -size && index < size, "select: index ", index,
                 " is out of range for dimension ", d, " of size ", size, " (shape ", shape(), ")");
  if (index < 0) index += size;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return reshape(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (size(d) != 1) return *this;  // as PyTorch: squeezing a dim that is not 1 is a no-op
  Shape s = shape();
  s.erase(s.begin() + d);
  return reshape(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape();
  s.insert(s.begin() + d, 1);
  return reshape(s);
}

Tensor Tensor::expand(const Shape& shape) const {
  Shape target = shape;
  const int64_t lead = int64_t(target.size()) - dim();
  for (size_t i = 0; i < target.size(); ++i)  // -1 keeps the existing size
    if (target[i] == -1 && int64_t(i) >= lead) target[i] = this->shape()[i - size_t(lead)];
  Tensor y = detail::expand_to(*this, target, "expand");
  // y = x broadcast to shape      dx = dy summed over the broadcast dims
  return record("expand", y, {*this}, {},
                [s = this->shape()](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  return {raw::sum_to(dy, s)};
                });
}

}  // namespace tandem
