// core/layout.h — non-recording tensor plumbing shared by the op layer and the kernels: strided
// views, contiguous copies, device and dtype conversion. These never touch autograd; the
// differentiable versions in autograd/ops/ call them and then record().
#pragma once

#include <tandem/core/tensor.h>
#include <optional>

namespace tandem::detail {

/// A new handle onto `t`'s storage with the given geometry (no autograd history, no checks).
Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);
/// `t` itself if contiguous, else a contiguous copy (no autograd).
Tensor contiguous(const Tensor& t);
/// A contiguous copy on `device` with `dtype` (no autograd).
Tensor convert(const Tensor& t, Device device, DType dtype);
/// `t` broadcast to `shape` as a stride-0 view; ShapeError naming `op` if it cannot be.
Tensor expand_to(const Tensor& t, const Shape& shape, const char* op);
/// `t`'s dims reordered (a view).
Tensor permute(const Tensor& t, const Shape& dims);
/// Strides for viewing `shape`'s elements as `new_shape` without a copy; nullopt if impossible.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& new_shape);
/// Resolves a -1 in `shape` against `numel`; ShapeError naming `op` when sizes do not match.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);
/// Bumps `t`'s version counter after an in-place write.
inline void bump_version(const Tensor& t) { t.impl().storage->bump_version(); }

}  // namespace tandem::detail
