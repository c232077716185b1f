// core/layout.cpp — strided views and copies without autograd. view_strides() is the rule that
// decides whether reshape can be a view (PyTorch's computeStride).
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <algorithm>

namespace tandem::detail {

Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl().storage;
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return convert(t, t.device(), t.dtype());
}

Tensor convert(const Tensor& t, Device device, DType dtype) {
  TD_CHECK_DEVICE(!t.device().is_meta() || device.is_meta(), "cannot copy a ", t.shape(), " ",
                  t.dtype(), " tensor on ", t.device(), " to ", device,
                  ": a meta tensor has a shape and a dtype but no values");
  Tensor out = empty(t.shape(), {.dtype = dtype, .device = device});
  if (out.numel() == 0) return out;
  // A copy between devices runs on the non-CPU side's table (it knows both memories); onto
  // meta, on meta's (nothing to copy).
  const Device runner = device.is_meta() ? device : t.device().is_cuda() ? t.device() : device;
  kernels(runner).copy(t, out);
  return out;
}

Tensor expand_to(const Tensor& t, const Shape& shape, const char* op) {
  const int64_t nd = int64_t(shape.size()), td = t.dim();
  TD_CHECK_SHAPE(nd >= td, op, ": cannot expand shape ", t.shape(), " to ", shape,
                 " (the target has fewer dimensions)");
  Strides strides(shape.size(), 0);
  for (int64_t i = 0; i < nd; ++i) {
    const int64_t j = i - (nd - td);
    if (j < 0) continue;  // new leading dims broadcast with stride 0
    const int64_t size = t.shape()[size_t(j)];
    if (size == shape[size_t(i)]) {
      strides[size_t(i)] = t.strides()[size_t(j)];
    } else {
      TD_CHECK_SHAPE(size == 1, op, ": cannot expand shape ", t.shape(), " to ", shape,
                     " (dimension ", j, " has size ", size, "; only size-1 dims can expand)");
    }
  }
  return as_strided(t, shape, strides, t.storage_offset());
}

Tensor permute(const Tensor& t, const Shape& dims) {
  Shape shape(dims.size());
  Strides strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    shape[i] = t.shape()[size_t(dims[i])];
    strides[i] = t.strides()[size_t(dims[i])];
  }
  return as_strided(t, shape, strides, t.storage_offset());
}

std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& new_shape) {
  Strides out(new_shape.size());
  if (tandem::numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  // Walk the old dims in chunks that are contiguous among themselves; each chunk must be
  // covered exactly by consecutive new dims.
  int64_t view_d = int64_t(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[size_t(d)];
    const bool chunk_end = d == 0 || (shape[size_t(d - 1)] != 1 &&
                                      strides[size_t(d - 1)] != tensor_numel * chunk_base_stride);
    if (!chunk_end) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[size_t(view_d)] == 1)) {
      out[size_t(view_d)] = view_numel * chunk_base_stride;
      view_numel *= new_shape[size_t(view_d)];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[size_t(d - 1)];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TD_CHECK_SHAPE(infer < 0, op, ": only one dimension can be -1, but got ", shape);
      infer = int64_t(i);
    } else {
      TD_CHECK_SHAPE(out[i] >= 0, op, ": invalid size ", out[i], " in ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TD_CHECK_SHAPE(known != 0 && numel % known == 0, op, ": shape ", shape,
                   " is invalid for a tensor of ", numel, " elements");
    out[size_t(infer)] = numel / known;
  }
  TD_CHECK_SHAPE(tandem::numel(out) == numel, op, ": shape ", shape, " is invalid for a tensor of ",
                 numel, " elements");
  return out;
}

}  // namespace tandem::detail
