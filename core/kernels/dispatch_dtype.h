// core/kernels/dispatch_dtype.h — runs a template lambda for the tensor's element type:
//   dispatch_float(x.dtype(), "relu_forward", [&]<typename T>() { ... });
// PyTorch's AT_DISPATCH_FLOATING_TYPES without the macro. Compiles as host code under nvcc too.
#pragma once

#include <tandem/core/check.h>
#include <tandem/core/dtype.h>
#include <cstdint>

namespace tandem {

/// float32 and float64.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      f.template operator()<float>();
      return;
    case DType::f64:
      f.template operator()<double>();
      return;
    default:
      detail::fail<DTypeError>(op, ": expected a floating dtype (float32 or float64), but got ", t);
  }
}

/// float32, float64 and int64.
template <typename F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      f.template operator()<float>();
      return;
    case DType::f64:
      f.template operator()<double>();
      return;
    case DType::i64:
      f.template operator()<int64_t>();
      return;
    default:
      detail::fail<DTypeError>(op, ": expected float32, float64 or int64, but got ", t);
  }
}

/// Every dtype.
template <typename F>
void dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32:
      f.template operator()<float>();
      return;
    case DType::f64:
      f.template operator()<double>();
      return;
    case DType::i64:
      f.template operator()<int64_t>();
      return;
    case DType::b8:
      f.template operator()<bool>();
      return;
  }
  detail::fail<DTypeError>(op, ": unknown dtype ", int(t));
}

}  // namespace tandem
