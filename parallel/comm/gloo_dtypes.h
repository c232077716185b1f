// parallel/comm/gloo_dtypes.h — how the Gloo communicator handles each dtype: the element type it
// hands Gloo, the reduction functions (Gloo's own for float, double and int64; for bfloat16 and
// float16 ones that compute each element in float and round once, as NCCL does), and the
// division that turns a sum into an average. Internal to gloo_communicator.cpp (it needs Gloo's
// headers).
#pragma once

#include <gloo/algorithm.h>
#include <gloo/math.h>
#include <tandem/core/check.h>
#include <tandem/core/dtype.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/comm/dtype_dispatch.h>
#include <algorithm>
#include <type_traits>

namespace tandem::parallel::gloo_detail {

using ::tandem::parallel::detail::by_dtype;

// Gloo's reductions compute in the element type, which the 16-bit types are not made for: these
// compute each element in float and round once (what NCCL does for bfloat16 and float16).
template <typename T>
constexpr bool kIs16Bit = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

inline float apply(ReduceOp op, float x, float y) {
  return op == ReduceOp::Max ? std::max(x, y) : op == ReduceOp::Min ? std::min(x, y) : x + y;
}

template <typename T, ReduceOp Op>
void reduce_16bit(void* c, const void* a, const void* b, size_t n) {  // c = a op b
  auto* pc = static_cast<T*>(c);
  const auto* pa = static_cast<const T*>(a);
  const auto* pb = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) pc[i] = T(apply(Op, float(pa[i]), float(pb[i])));
}

template <typename T, ReduceOp Op>
void reduce_16bit_inplace(T* x, const T* y, size_t n) {  // x = x op y
  for (size_t i = 0; i < n; ++i) x[i] = T(apply(Op, float(x[i]), float(y[i])));
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  if constexpr (kIs16Bit<T>) {
    return op == ReduceOp::Max   ? &reduce_16bit<T, ReduceOp::Max>
           : op == ReduceOp::Min ? &reduce_16bit<T, ReduceOp::Min>
                                 : &reduce_16bit<T, ReduceOp::Sum>;  // Mean = sum, then divide
  } else {
    switch (op) {
      case ReduceOp::Max:
        return static_cast<ReduceFn>(&gloo::max<T>);
      case ReduceOp::Min:
        return static_cast<ReduceFn>(&gloo::min<T>);
      default:
        return static_cast<ReduceFn>(&gloo::sum<T>);  // Mean = sum, then divide
    }
  }
}

template <typename T>
const gloo::ReductionFunction<T>* classic_fn(ReduceOp op) {
  if constexpr (kIs16Bit<T>) {
    static const gloo::ReductionFunction<T> sum(gloo::SUM, &reduce_16bit_inplace<T, ReduceOp::Sum>),
        max(gloo::MAX, &reduce_16bit_inplace<T, ReduceOp::Max>),
        min(gloo::MIN, &reduce_16bit_inplace<T, ReduceOp::Min>);
    return op == ReduceOp::Max ? &max : op == ReduceOp::Min ? &min : &sum;
  } else {
    switch (op) {
      case ReduceOp::Max:
        return gloo::ReductionFunction<T>::max;
      case ReduceOp::Min:
        return gloo::ReductionFunction<T>::min;
      default:
        return gloo::ReductionFunction<T>::sum;
    }
  }
}

template <typename T>
void divide(T* p, int64_t n, int by) {
  if constexpr (kIs16Bit<T>) {
    for (int64_t i = 0; i < n; ++i) p[i] = T(float(p[i]) / float(by));
  } else if constexpr (std::is_floating_point_v<T>) {
    const T inv = T(1) / T(by);  // a multiply vectorises; within an ulp of dividing
    for (int64_t i = 0; i < n; ++i) p[i] *= inv;
  } else {
    for (int64_t i = 0; i < n; ++i) p[i] /= T(by);
  }
}

}  // namespace tandem::parallel::gloo_detail
