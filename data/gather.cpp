// data/gather.cpp — row gathers for tensor-backed datasets. Rows are contiguous, so on the host a
// batch is B memcpys into one allocation: no per-example tensors, no per-element loop. Tensors on
// a GPU take one device copy per row (correct, if slower; keep datasets on the host and move each
// batch with .to(device), as in PyTorch).
#include <tandem/core/layout.h>
#include <tandem/data/dataset.h>
#include <tandem/data/gather.h>
#include <cstring>

namespace tandem::data::detail {
namespace {

Shape row_shape(const Tensor& src) { return Shape(src.shape().begin() + 1, src.shape().end()); }

}  // namespace

Tensor gather_rows(const char* who, const Tensor& src, const std::vector<int64_t>& indices) {
  TD_INTERNAL_ASSERT(src.dim() >= 1 && src.is_contiguous(), "gather_rows needs a contiguous ",
                     "tensor with a dim 0, got ", src.shape());
  const int64_t n = src.size(0);
  for (int64_t i : indices) check_index(who, i, n);
  const Shape rest = row_shape(src);
  Shape shape{int64_t(indices.size())};
  shape.insert(shape.end(), rest.begin(), rest.end());
  Tensor out = empty(shape, {.dtype = src.dtype(), .device = src.device()});
  const int64_t row = numel(rest);
  if (src.device().is_cpu()) {
    const size_t bytes = size_t(row) * element_size(src.dtype());
    if (bytes == 0) return out;
    const char* from = static_cast<const char*>(src.data_ptr());
    char* to = static_cast<char*>(out.data_ptr());
    for (size_t b = 0; b < indices.size(); ++b)
      std::memcpy(to + b * bytes, from + size_t(indices[b]) * bytes, bytes);
    return out;
  }
  const Strides strides = contiguous_strides(rest);
  for (size_t b = 0; b < indices.size(); ++b) {
    Tensor dst = tandem::detail::as_strided(out, rest, strides, int64_t(b) * row);
    dst.copy_(
        tandem::detail::as_strided(src, rest, strides, src.storage_offset() + indices[b] * row));
  }
  return out;
}

Tensor row_view(const char* who, const Tensor& src, int64_t index) {
  check_index(who, index, src.size(0));
  const Shape rest = row_shape(src);
  return tandem::detail::as_strided(src, rest,
                                    Strides(src.strides().begin() + 1, src.strides().end()),
                                    src.storage_offset() + index * src.stride(0));
}

}  // namespace tandem::data::detail
