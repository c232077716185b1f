// parallel/comm/dtype_dispatch.h — the element types collectives move: a switch from a DType
// to a typed call, shared by the transports that compute on raw memory (Gloo, shared memory).
#pragma once

#include <tandem/core/check.h>
#include <tandem/core/dtype.h>
#include <tandem/core/float16.h>
#include <cstdint>

namespace tandem::parallel::detail {

// Calls f with a typed null pointer for t's dtype (float, double, int64_t, BFloat16, Float16).
template <typename F>
void by_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(static_cast<float*>(nullptr));
    case DType::f64:
      return f(static_cast<double*>(nullptr));
    case DType::i64:
      return f(static_cast<int64_t*>(nullptr));
    case DType::bf16:
      return f(static_cast<BFloat16*>(nullptr));
    case DType::f16:
      return f(static_cast<Float16*>(nullptr));
    default:
      ::tandem::detail::fail<DTypeError>("collectives: unsupported dtype ", dtype);
  }
}

}  // namespace tandem::parallel::detail
