// parallel/comm/shm_reduce.h — the arithmetic of the shared-memory collectives: element-wise
// reduction of the same range of every rank's buffer, in rank order, so every rank that reduces
// a range gets the same bits. 16-bit floats accumulate in float and round once (as NCCL does).
// Blocks of 1024 elements keep the accumulator in L1 and let the compiler vectorise the loops;
// `dst` may be one of the sources (the reduction of a block is complete before it is written);
// `dst2`, if given, receives the same values (the all-reduce writes its slice to its tensor and
// to shared memory for the peers in one pass).
#pragma once

#include <tandem/core/reduce_op.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tandem::parallel::detail {

/// memcpy, except that an empty tensor's null pointer is fine (memcpy's arguments must not be
/// null even for zero bytes).
inline void shm_copy(void* dst, const void* src, size_t n) {
  if (n > 0) std::memcpy(dst, src, n);
}

template <typename T>
using ShmAccumulator =
    std::conditional_t<std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>, float, T>;

template <typename T>
void shm_reduce(T* dst, const T* const* srcs, int nsrc, int64_t count, ReduceOp op,
                T* dst2 = nullptr) {
  using A = ShmAccumulator<T>;
  constexpr int64_t kBlock = 1024;
  A acc[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t n = std::min(kBlock, count - b);
    const T* s0 = srcs[0] + b;
    for (int64_t i = 0; i < n; ++i) acc[i] = A(s0[i]);
    for (int k = 1; k < nsrc; ++k) {
      const T* s = srcs[k] + b;
      switch (op) {
        case ReduceOp::Max:
          for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], A(s[i]));
          break;
        case ReduceOp::Min:
          for (int64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], A(s[i]));
          break;
        default:  // Sum, Mean
          for (int64_t i = 0; i < n; ++i) acc[i] += A(s[i]);
      }
    }
    if (op == ReduceOp::Mean)
      for (int64_t i = 0; i < n; ++i) acc[i] /= A(nsrc);
    T* d = dst + b;
    for (int64_t i = 0; i < n; ++i) d[i] = T(acc[i]);
    if (dst2 != nullptr) std::copy(d, d + n, dst2 + b);
  }
}

}  // namespace tandem::parallel::detail
