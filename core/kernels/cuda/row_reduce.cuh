// core/kernels/cuda/row_reduce.cuh — what the row-wise kernels (softmax.cu, loss.cu) share: a
// group of G threads per row (a warp for short rows, a block for long ones), the all-reduce over
// that group, and float/double spellings of exp, log and max.
#pragma once

#include <cuda_runtime.h>
#include <cstdint>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>

namespace tandem::cuda {

inline constexpr int64_t kWarpRowMax = 512;  // rows up to this long get a warp, longer a block

template <typename T>
__device__ T max_of(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return fmaxf(a, b);
  else
    return fmax(a, b);
}

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

// fmax drops NaN symmetrically, so every lane of the butterfly ends with the same value; a NaN in
// a row still makes the row's result NaN, as on the CPU, through exp(NaN − max) in the sum.
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return max_of(a, b);
  }
};

// All-reduce over a group of G threads (a warp, or a whole block of G threads): every thread of
// the group gets the same value, combined in the same order.
template <int G, typename T, typename Op>
__device__ T group_reduce(T v, Op op) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  if constexpr (G > kWarp) {
    __shared__ T per_warp[G / kWarp];
    const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
    if (lane == 0) per_warp[warp] = v;
    __syncthreads();
    v = per_warp[0];
    for (int w = 1; w < G / kWarp; ++w) v = op(v, per_warp[w]);
    __syncthreads();  // per_warp is written again by the next reduction
  }
  return v;
}

}  // namespace tandem::cuda
