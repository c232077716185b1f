// core/kernels/cuda/square_sums.cuh — the kernels of square_sums.cu: Σ x² in float64 for each of
// up to 48 tensors of one dtype per launch (clip_grad_norm_'s pass over a model's gradients, which
// took three kernels per gradient before: a float64 copy, a product, a sum).
//
// Deterministic without atomics, as cpu/square_sums.cpp is: block b sums its chunk of kChunk
// elements into partial[b] (each thread a strided part, then the block's fixed tree), and a second
// launch gives each tensor a block that adds its chunks' partials in the same fixed way. The same
// bits every run. Kept apart from the launcher so that tests/emulated/ can run this very source on
// CPU threads.
#pragma once

#include <tandem/core/float16.h>
#include <cstdint>
#include <type_traits>

#if defined(TANDEM_CUDA_EMULATION)
#define TANDEM_SQUARE_SUMS_SHARED(type, name, n) \
  type* name = reinterpret_cast<type*>(::tandem::emulation::dynamic_shared())
#else
#include <cuda_runtime.h>
#define TANDEM_SQUARE_SUMS_SHARED(type, name, n) __shared__ type name[n]
#endif

namespace tandem::cuda::squares {

inline constexpr int kBlockThreads = 256;
inline constexpr int kWarps = kBlockThreads / 32;
inline constexpr int64_t kChunk = 32 * kBlockThreads;  // elements per block of the first launch
inline constexpr int kSlots = 48;                      // tensors per launch
inline constexpr size_t kSharedBytes = kWarps * sizeof(double);

// Up to kSlots tensors of one dtype; tensor i owns blocks [first_block[i], first_block[i + 1]).
template <typename T>
struct Batch {
  const T* x[kSlots];
  int64_t numel[kSlots];
  int64_t first_block[kSlots + 1];
  int count;
};

template <typename T>
__device__ double widened(T v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else
    return double(float(v));  // bfloat16 and float16 through float, exactly
}

// The block's Σ v in a fixed order: the lanes of each warp by a butterfly, then the warps in
// order by thread 0, whose return value is the sum (the others' are not).
__device__ inline double block_sum(double v, double* per_warp) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) per_warp[threadIdx.x / 32] = v;
  __syncthreads();
  double s = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kWarps; ++w) s += per_warp[w];
  return s;
}

// partial[block] = Σ x² over the block's chunk of its tensor.
template <typename T>
__global__ void square_sum_chunks_kernel(Batch<T> b, double* partial) {
  TANDEM_SQUARE_SUMS_SHARED(double, per_warp, kWarps);
  const int64_t block = int64_t(blockIdx.x);
  int t = 0;
  while (t + 1 < b.count && block >= b.first_block[t + 1]) ++t;
  const int64_t lo = (block - b.first_block[t]) * kChunk;
  const int64_t hi = lo + kChunk < b.numel[t] ? lo + kChunk : b.numel[t];
  double s = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += kBlockThreads) {
    const double v = widened(b.x[t][i]);
    s += v * v;
  }
  s = block_sum(s, per_warp);
  if (threadIdx.x == 0) partial[block] = s;
}

// out[t] = Σ of tensor t's partials, one block per tensor (0 for an empty tensor).
template <typename T>
__global__ void square_sum_totals_kernel(Batch<T> b, const double* partial, double* out) {
  TANDEM_SQUARE_SUMS_SHARED(double, per_warp, kWarps);
  const int t = int(blockIdx.x);
  double s = 0;
  for (int64_t c = b.first_block[t] + threadIdx.x; c < b.first_block[t + 1]; c += kBlockThreads)
    s += partial[c];
  s = block_sum(s, per_warp);
  if (threadIdx.x == 0) out[t] = s;
}

}  // namespace tandem::cuda::squares
