// core/kernels/cuda/flash_tiles.cuh — what the tensor-core attention kernels (flash_attention.cu)
// share: the tiles in shared memory, the warp's products of tiles on the tensor cores (WMMA:
// 16×16×16 steps of 16-bit inputs into float accumulators), and the element rules, which are
// attention.cu's (the CUDA-core kernel) to the letter: the same score, the same causal and
// additive masks, the same dropout counters, so the two differ only by rounding.
//
// A block is 4 warps and owns a tile of 64 rows of one batch entry (queries in the forward and for
// dQ, keys for dK and dV); each warp owns 16 of them. The other side streams through in tiles of
// 64 rows, staged in shared memory once for all four warps. Tiles are padded by 8 elements a row
// (16 bytes) so that the tensor cores' 16-row loads fall on different banks.
#pragma once

#include <tandem/core/generator.h>
#include <limits>

#if defined(TANDEM_CUDA_EMULATION)
// tests/emulated/cuda_emulation.h stands in for the CUDA headers (and device_math.cuh): the
// kernels run on CPU threads.
#define TANDEM_FLASH_SHARED(name) unsigned char* name = ::tandem::emulation::dynamic_shared()
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <tandem/core/kernels/cuda/launch.cuh>
// The block's shared memory, sized at launch.
#define TANDEM_FLASH_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif

namespace tandem::cuda::flash {

inline constexpr int kTile = 64;  // rows of a block's tile, and of a streamed one
inline constexpr int kWarps = 4;  // each owns 16 rows of the block's tile
inline constexpr int kBlockThreads = kWarps * kWarp;
inline constexpr int kLdF = kTile + 4;  // float [16, 64] score tiles (WMMA: a multiple of 4)
inline constexpr int kLdP = kTile + 8;  // 16-bit [16, 64] probability tiles (a multiple of 8)
template <int D>
inline constexpr int kLd = D + 8;  // 16-bit [64, D] tiles of q, k, v, dO
template <int D>
inline constexpr int kLdO = D + 4;  // float [16, D] accumulators

template <typename S>
using FragA =
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, S, nvcuda::wmma::row_major>;
template <typename S>
using FragB =
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, S, nvcuda::wmma::row_major>;
// B = Xᵀ for a row-major X: a column-major read of X.
template <typename S>
using FragBt =
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, S, nvcuda::wmma::col_major>;
using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;

__device__ inline float up(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float up(__half x) { return __half2float(x); }
// Round to nearest even, as widen.h's float32 results are rounded.
template <typename S>
__device__ S down(float x);
template <>
__device__ inline __nv_bfloat16 down<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half down<__half>(float x) {
  return __float2half_rn(x);
}

/// The larger of a and b, NaN when either is: fmaxf drops a NaN, and a row of NaN scores then
/// passed for a row that saw no key (zeros out) where the Math backend gives NaN.
__device__ inline float max_or_nan(float a, float b) { return (a < b || b != b) ? b : a; }

/// The element rules of one batch of attention, in float.
template <typename S>
struct Scores {
  const S* mask;  // additive, [1 or B, Tq, Tk], or null
  bool mask_per_batch, causal;
  float scale, dropout_p;
  uint64_t seed, offset;
  int64_t tq, tk;
  int64_t batch_stride, row_stride;  // of the dropout counters (AttentionParams)

  // Query i may see key j: both exist, and j <= i when causal (top-left, as attention.cu).
  __device__ bool visible(int64_t i, int64_t j) const {
    return i < tq && j < tk && !(causal && j > i);
  }
  __device__ float score(float dot, int64_t batch, int64_t i, int64_t j) const {
    float s = dot * scale;
    if (mask) s += up(mask[((mask_per_batch ? batch : 0) * tq + i) * tk + j]);
    return s;
  }
  // keep/(1 − p) for (batch, i, j): the counter rand() of [B, Tq, Tk] would use (or of the
  // longer sequence the strides say).
  __device__ float keep(int64_t batch, int64_t i, int64_t j) const {
    if (dropout_p <= 0.f) return 1.f;
    const uint64_t at = uint64_t(batch * batch_stride + i * row_stride + j);
    return philox_unit<float>(philox(offset + at, seed), 0) >= dropout_p ? 1.f / (1.f - dropout_p)
                                                                         : 0.f;
  }
  // The probability of a visible (i, j) from its dot product and the row's log-sum-exp: zero
  // where the row saw no key at all, e^−∞ = 0 where the mask hid the key, NaN in a NaN row.
  __device__ float probability(float dot, int64_t batch, int64_t i, int64_t j, float lse) const {
    const float s = score(dot, batch, i, j);
    return lse == -std::numeric_limits<float>::infinity() ? 0.f : d_exp(s - lse);
  }
};

/// Every thread of the block: rows [first, first + 64) of src [rows, D] into `tile`, zeros past
/// the last row. 16 bytes a load: the launcher makes sure src is 16-byte aligned.
template <typename S, int D>
__device__ void load_tile(S* tile, const S* src, int64_t first, int64_t rows) {
  constexpr int kChunks = D / 8;
  for (int x = int(threadIdx.x); x < kTile * kChunks; x += kBlockThreads) {
    const int r = x / kChunks, c = (x % kChunks) * 8;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (first + r < rows) v = *reinterpret_cast<const uint4*>(src + (first + r) * D + c);
    *reinterpret_cast<uint4*>(tile + r * kLd<D> + c) = v;
  }
}

/// One warp: out [16, 64] (float, kLdF apart) = a [16, D] · bᵀ, with a 16 rows of a tile and b a
/// whole [64, D] tile: the scores of 16 rows against a streamed tile.
template <typename S, int D>
__device__ void times_tile_t(const S* a, const S* b, float* out) {
  using namespace nvcuda;
  FragA<S> fa[D / 16];
  for (int k = 0; k < D / 16; ++k) wmma::load_matrix_sync(fa[k], a + k * 16, kLd<D>);
  for (int n = 0; n < kTile / 16; ++n) {
    Acc acc;
    wmma::fill_fragment(acc, 0.f);
    for (int k = 0; k < D / 16; ++k) {
      FragBt<S> fb;
      wmma::load_matrix_sync(fb, b + n * 16 * kLd<D> + k * 16, kLd<D>);
      wmma::mma_sync(acc, fa[k], fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kLdF, wmma::mem_row_major);
  }
}

/// One warp: acc [16, D] += p [16, 64] (16-bit, kLdP apart) · b, with b a whole [64, D] tile.
template <typename S, int D>
__device__ void accumulate_times_tile(const S* p, const S* b, Acc (&acc)[D / 16]) {
  using namespace nvcuda;
  for (int k = 0; k < kTile / 16; ++k) {
    FragA<S> fa;
    wmma::load_matrix_sync(fa, p + k * 16, kLdP);
    for (int n = 0; n < D / 16; ++n) {
      FragB<S> fb;
      wmma::load_matrix_sync(fb, b + k * 16 * kLd<D> + n * 16, kLd<D>);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

/// One warp: its [16, D] accumulators, times `factor`, rounded into rows [first, first + 16) of
/// dst [rows, D], through `stage` (float, 16 × kLdO<D>). Lane pairs write a row each.
template <typename S, int D>
__device__ void write_rows(const Acc (&acc)[D / 16], float factor, float* stage, S* dst,
                           int64_t first, int64_t rows) {
  using namespace nvcuda;
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], kLdO<D>, wmma::mem_row_major);
  __syncwarp();
  const int lane = int(threadIdx.x % kWarp), r = lane / 2, half = lane % 2;
  if (first + r < rows) {
    const float* from = stage + r * kLdO<D> + half * (D / 2);
    S* to = dst + (first + r) * D + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) to[c] = down<S>(from[c] * factor);
  }
  __syncwarp();  // the stage is free again
}

}  // namespace tandem::cuda::flash
