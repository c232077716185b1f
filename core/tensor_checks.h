// core/tensor_checks.h — the typed checks every op starts with, so no op writes its own message:
//   check_same_device("conv2d", {{"input", x}, {"weight", w}});
// Messages name the op and both operands' shapes, dtypes and devices, with a hint when the fix
// is likely.
#pragma once

#include <tandem/core/tensor.h>
#include <initializer_list>
#include <string_view>

namespace tandem {

struct NamedTensor {
  std::string_view name;
  const Tensor& tensor;
};

/// DeviceError when the defined tensors are not all on one device.
void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors);
/// DTypeError when the defined tensors do not all have one dtype.
void check_same_dtype(const char* op, std::initializer_list<NamedTensor> tensors);
/// DTypeError unless `t` is float32 or float64.
void check_floating(const char* op, std::string_view what, const Tensor& t);
/// DTypeError unless `t` has `dtype`.
void check_dtype(const char* op, std::string_view what, const Tensor& t, DType dtype);
/// ShapeError unless `t` has `dims` dimensions; `layout` describes them ("[N, C, H, W]").
void check_dim(const char* op, std::string_view what, const Tensor& t, int64_t dims,
               std::string_view layout);
/// Error when `t` is undefined.
void check_defined(const char* op, std::string_view what, const Tensor& t);

/// "[2, 3] float32 on cpu:1" — how messages describe a tensor.
std::string describe(const Tensor& t);

}  // namespace tandem
