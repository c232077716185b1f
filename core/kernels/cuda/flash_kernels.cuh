// core/kernels/cuda/flash_kernels.cuh — the tensor-core attention kernels themselves (the host
// side that launches them: flash_attention.cu, whose top says what they compute), kept apart so
// that tests/emulated/ can run the same source on CPU threads.
#pragma once

#include <tandem/core/check.h>
#include <tandem/core/kernels/params.h>
#include <tandem/core/tensor.h>
#include <tandem/core/kernels/cuda/flash_tiles.cuh>

namespace tandem::cuda::flash {

using nvcuda::wmma::load_matrix_sync;
using nvcuda::wmma::mem_row_major;
using nvcuda::wmma::store_matrix_sync;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Bytes of shared memory: a 16-bit [64, D] tile, a warp's float [16, 64] and 16-bit [16, 64]
// tiles for all four warps, and all four warps' float [16, D] accumulators.
template <int D>
constexpr size_t kTileBytes = size_t(kTile) * kLd<D> * 2;
constexpr size_t kScoreBytes = size_t(kWarps) * 16 * kLdF * 4;
constexpr size_t kProbBytes = size_t(kWarps) * 16 * kLdP * 2;
template <int D>
constexpr size_t kAccBytes = size_t(kWarps) * 16 * kLdO<D> * 4;

template <typename S, int D>
constexpr size_t kForwardBytes = 3 * kTileBytes<D> + kScoreBytes + kProbBytes + kAccBytes<D>;
template <typename S, int D>
constexpr size_t kDqBytes = 4 * kTileBytes<D> + 2 * kScoreBytes + kProbBytes;
template <typename S, int D>
constexpr size_t kDkDvBytes = 4 * kTileBytes<D> + 2 * kScoreBytes + 2 * kProbBytes + 2 * kTile * 4;
// The final staging of dQ (or dK, dV) reuses two 16-bit tiles: they always have the room.
static_assert(2 * kTileBytes<32> >= kAccBytes<32> && 2 * kTileBytes<128> >= kAccBytes<128>);

// Carves the block's shared memory in order; every piece is a multiple of 32 bytes (WMMA's
// alignment), as the sizes above are.
struct Carver {
  unsigned char* at;
  template <typename T>
  __device__ T* take(size_t bytes) {
    T* p = reinterpret_cast<T*>(at);
    at += bytes;
    return p;
  }
};

template <typename S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_forward_kernel(const S* q, const S* k, const S* v, Scores<S> sc, int64_t tiles, S* out,
                         float* lse) {
  TANDEM_FLASH_SHARED(shared);
  Carver carve{shared};
  S* qs = carve.take<S>(kTileBytes<D>);
  S* ks = carve.take<S>(kTileBytes<D>);
  S* vs = carve.take<S>(kTileBytes<D>);
  float* scores = carve.take<float>(kScoreBytes);
  S* probs = carve.take<S>(kProbBytes);
  float* outs = carve.take<float>(kAccBytes<D>);

  const int warp = int(threadIdx.x / kWarp), lane = int(threadIdx.x % kWarp);
  const int64_t batch = blockIdx.x / tiles, q0 = (blockIdx.x % tiles) * kTile;
  const int64_t tq = sc.tq, tk = sc.tk;
  q += batch * tq * D, k += batch * tk * D, v += batch * tk * D;
  load_tile<S, D>(qs, q, q0, tq);
  float* sw = scores + warp * 16 * kLdF;
  S* pw = probs + warp * 16 * kLdP;
  float* ow = outs + warp * 16 * kLdO<D>;
  for (int x = lane; x < 16 * kLdO<D>; x += kWarp) ow[x] = 0.f;
  // This lane's share of the element work: row r of the warp's 16, and half of its columns.
  const int r = lane / 2, half = lane % 2;
  const int64_t i = q0 + warp * 16 + r;
  float m = -kInf, l = 0.f;  // the row's running maximum and sum (both lanes of the row agree)
  const int64_t kv_end = sc.causal && q0 + kTile < tk ? q0 + kTile : tk;
  for (int64_t k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();  // every warp is done with the last K and V tiles (and q is loaded)
    load_tile<S, D>(ks, k, k0, tk);
    load_tile<S, D>(vs, v, k0, tk);
    __syncthreads();
    times_tile_t<S, D>(qs + warp * 16 * kLd<D>, ks, sw);
    __syncwarp();
    float* srow = sw + r * kLdF + half * 32;
    S* prow = pw + r * kLdP + half * 32;
    const int64_t j0 = k0 + half * 32;
    float mx = -kInf;
    for (int c = 0; c < 32; ++c) {
      const float s = sc.visible(i, j0 + c) ? sc.score(srow[c], batch, i, j0 + c) : -kInf;
      srow[c] = s;
      mx = max_or_nan(mx, s);
    }
    const float m_new = max_or_nan(m, max_or_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
    float alpha = 1.f, sum = 0.f;
    if (m_new == -kInf) {  // nothing seen in this row yet
      for (int c = 0; c < 32; ++c) prow[c] = down<S>(0.f);
    } else {
      alpha = d_exp(m - m_new);
      for (int c = 0; c < 32; ++c) {
        const float p = srow[c] == -kInf ? 0.f : d_exp(srow[c] - m_new);
        sum += p;
        prow[c] = down<S>(p * sc.keep(batch, i, j0 + c));
      }
    }
    l = alpha * l + sum + __shfl_xor_sync(0xffffffffu, sum, 1);
    m = m_new;
    float* orow = ow + r * kLdO<D> + half * (D / 2);
    for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
    __syncwarp();
    Acc o[D / 16];
    for (int n = 0; n < D / 16; ++n) load_matrix_sync(o[n], ow + n * 16, kLdO<D>, mem_row_major);
    accumulate_times_tile<S, D>(pw, vs, o);
    for (int n = 0; n < D / 16; ++n) store_matrix_sync(ow + n * 16, o[n], kLdO<D>, mem_row_major);
    __syncwarp();
  }
  if (i < tq) {
    const int64_t row = batch * tq + i;
    const float* orow = ow + r * kLdO<D> + half * (D / 2);
    S* dst = out + row * D + half * (D / 2);
    // l = 0: the row saw no key, output 0; a NaN l (a NaN score or value) gives NaN.
    for (int c = 0; c < D / 2; ++c) dst[c] = down<S>(l == 0.f ? 0.f : orow[c] / l);
    if (half == 0) lse[row] = l == 0.f ? -kInf : m + d_log(l);
  }
}

// D_i = Σ dO_i·O_i in float, a warp per row.
template <typename S>
__global__ void flash_delta_kernel(const S* out, const S* dout, float* delta, int64_t rows, int d) {
  const int lane = int(threadIdx.x % kWarp);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp; r < rows;
       r += warps) {
    float s = 0.f;
    for (int c = lane; c < d; c += kWarp) s += up(out[r * d + c]) * up(dout[r * d + c]);
    for (int o = kWarp / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) delta[r] = s;
  }
}

// dQ_i = Σ_j dS_ij·k_j·scale, dS = P ∘ (dP ∘ keep − D), dP = dO·vᵀ: a block per 64 queries.
template <typename S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_dq_kernel(const S* q, const S* k, const S* v, const S* dout, const float* lse,
                    const float* delta, Scores<S> sc, int64_t tiles, S* dq) {
  TANDEM_FLASH_SHARED(shared);
  Carver carve{shared};
  S* ks = carve.take<S>(kTileBytes<D>);
  S* vs = carve.take<S>(kTileBytes<D>);
  S* qs = carve.take<S>(kTileBytes<D>);
  S* gs = carve.take<S>(kTileBytes<D>);  // dO
  float* scores = carve.take<float>(kScoreBytes);
  float* dps = carve.take<float>(kScoreBytes);
  S* dss = carve.take<S>(kProbBytes);

  const int warp = int(threadIdx.x / kWarp), lane = int(threadIdx.x % kWarp);
  const int64_t batch = blockIdx.x / tiles, q0 = (blockIdx.x % tiles) * kTile;
  const int64_t tq = sc.tq, tk = sc.tk;
  q += batch * tq * D, k += batch * tk * D, v += batch * tk * D, dout += batch * tq * D;
  load_tile<S, D>(qs, q, q0, tq);
  load_tile<S, D>(gs, dout, q0, tq);
  float* sw = scores + warp * 16 * kLdF;
  float* dpw = dps + warp * 16 * kLdF;
  S* dsw = dss + warp * 16 * kLdP;
  const int r = lane / 2, half = lane % 2;
  const int64_t i = q0 + warp * 16 + r;
  const float li = i < tq ? lse[batch * tq + i] : -kInf, di = i < tq ? delta[batch * tq + i] : 0.f;
  Acc acc[D / 16];
  for (Acc& a : acc) nvcuda::wmma::fill_fragment(a, 0.f);
  const int64_t kv_end = sc.causal && q0 + kTile < tk ? q0 + kTile : tk;
  for (int64_t k0 = 0; k0 < kv_end; k0 += kTile) {
    __syncthreads();
    load_tile<S, D>(ks, k, k0, tk);
    load_tile<S, D>(vs, v, k0, tk);
    __syncthreads();
    times_tile_t<S, D>(qs + warp * 16 * kLd<D>, ks, sw);   // S = q·kᵀ
    times_tile_t<S, D>(gs + warp * 16 * kLd<D>, vs, dpw);  // dP = dO·vᵀ
    __syncwarp();
    const int64_t j0 = k0 + half * 32;
    for (int c = 0; c < 32; ++c) {
      const int64_t j = j0 + c;
      float ds = 0.f;
      if (sc.visible(i, j)) {
        const float p = sc.probability(sw[r * kLdF + half * 32 + c], batch, i, j, li);
        ds = p * (dpw[r * kLdF + half * 32 + c] * sc.keep(batch, i, j) - di);
      }
      dsw[r * kLdP + half * 32 + c] = down<S>(ds);
    }
    __syncwarp();
    accumulate_times_tile<S, D>(dsw, ks, acc);
  }
  __syncthreads();  // every warp is done with K and V: their room stages the result
  write_rows<S, D>(acc, sc.scale, reinterpret_cast<float*>(ks) + warp * 16 * kLdO<D>,
                   dq + batch * tq * D, q0 + warp * 16, tq);
}

// dK_j = Σ_i dS_ij·q_i·scale and dV_j = Σ_i P̃_ij·dO_i: a block per 64 keys, each warp's 16 keys
// as the rows of Sᵀ = k·qᵀ and dPᵀ = v·dOᵀ.
template <typename S, int D>
__global__ void __launch_bounds__(kBlockThreads)
    flash_dkdv_kernel(const S* q, const S* k, const S* v, const S* dout, const float* lse,
                      const float* delta, Scores<S> sc, int64_t tiles, S* dk, S* dv) {
  TANDEM_FLASH_SHARED(shared);
  Carver carve{shared};
  S* qs = carve.take<S>(kTileBytes<D>);
  S* gs = carve.take<S>(kTileBytes<D>);  // dO
  S* ks = carve.take<S>(kTileBytes<D>);
  S* vs = carve.take<S>(kTileBytes<D>);
  float* scores = carve.take<float>(kScoreBytes);
  float* dps = carve.take<float>(kScoreBytes);
  S* pts = carve.take<S>(kProbBytes);
  S* dsts = carve.take<S>(kProbBytes);
  float* lse_s = carve.take<float>(kTile * 4);
  float* delta_s = carve.take<float>(kTile * 4);

  const int warp = int(threadIdx.x / kWarp), lane = int(threadIdx.x % kWarp);
  const int64_t batch = blockIdx.x / tiles, k0 = (blockIdx.x % tiles) * kTile;
  const int64_t tq = sc.tq, tk = sc.tk;
  q += batch * tq * D, k += batch * tk * D, v += batch * tk * D, dout += batch * tq * D;
  lse += batch * tq, delta += batch * tq;
  load_tile<S, D>(ks, k, k0, tk);
  load_tile<S, D>(vs, v, k0, tk);
  float* sw = scores + warp * 16 * kLdF;
  float* dpw = dps + warp * 16 * kLdF;
  S* ptw = pts + warp * 16 * kLdP;
  S* dstw = dsts + warp * 16 * kLdP;
  const int r = lane / 2, half = lane % 2;
  const int64_t j = k0 + warp * 16 + r;  // this lane's key
  Acc gk[D / 16], gv[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    nvcuda::wmma::fill_fragment(gk[n], 0.f);
    nvcuda::wmma::fill_fragment(gv[n], 0.f);
  }
  // Causal: a query before the tile's first key sees none of its keys.
  for (int64_t i0 = sc.causal ? k0 : 0; i0 < tq; i0 += kTile) {
    __syncthreads();  // every warp is done with the last q and dO tiles (and K, V are loaded)
    load_tile<S, D>(qs, q, i0, tq);
    load_tile<S, D>(gs, dout, i0, tq);
    if (int(threadIdx.x) < kTile) {
      const int64_t i = i0 + int(threadIdx.x);
      lse_s[threadIdx.x] = i < tq ? lse[i] : -kInf;
      delta_s[threadIdx.x] = i < tq ? delta[i] : 0.f;
    }
    __syncthreads();
    times_tile_t<S, D>(ks + warp * 16 * kLd<D>, qs, sw);   // Sᵀ = k·qᵀ
    times_tile_t<S, D>(vs + warp * 16 * kLd<D>, gs, dpw);  // dPᵀ = v·dOᵀ
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      const int col = half * 32 + c;
      const int64_t i = i0 + col;
      float kept = 0.f, ds = 0.f;
      if (sc.visible(i, j)) {
        const float p = sc.probability(sw[r * kLdF + col], batch, i, j, lse_s[col]);
        const float keep = sc.keep(batch, i, j);
        kept = p * keep;
        ds = p * (dpw[r * kLdF + col] * keep - delta_s[col]);
      }
      ptw[r * kLdP + col] = down<S>(kept);
      dstw[r * kLdP + col] = down<S>(ds);
    }
    __syncwarp();
    accumulate_times_tile<S, D>(ptw, gs, gv);   // dV += P̃ᵀ·dO
    accumulate_times_tile<S, D>(dstw, qs, gk);  // dK += dSᵀ·q
  }
  __syncthreads();  // every warp is done with q and dO: their room stages the results
  float* stage = reinterpret_cast<float*>(qs) + warp * 16 * kLdO<D>;
  write_rows<S, D>(gk, sc.scale, stage, dk + batch * tk * D, k0 + warp * 16, tk);
  write_rows<S, D>(gv, 1.f, stage, dv + batch * tk * D, k0 + warp * 16, tk);
}

// ---- for the host ----

/// A tensor's data as the kernels' 16-bit type; an output must be contiguous and 16-byte aligned
/// (the tiles' vector stores).
template <typename S>
const S* in(const Tensor& t) {
  return reinterpret_cast<const S*>(t.data_ptr());
}
template <typename S>
S* out_of(Tensor& t) {
  TD_INTERNAL_ASSERT(t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                     "flash attention: outputs must be contiguous and 16-byte aligned");
  return reinterpret_cast<S*>(t.data_ptr());
}

/// The block tiles of `rows` rows.
inline int64_t tiles_of(int64_t rows) { return (rows + kTile - 1) / kTile; }

/// The element rules for q [B, Tq, D] and k [B, Tk, D], the kernels' mask (additive, in q's dtype,
/// [1 or B, Tq, Tk], or undefined) and the op's parameters.
template <typename S>
Scores<S> scores_for(const Tensor& q, const Tensor& k, const Tensor& mask,
                     const AttentionParams& a) {
  return {mask.defined() ? in<S>(mask) : nullptr,
          mask.defined() && mask.size(0) > 1,
          a.causal,
          float(a.scale),
          float(a.dropout_p),
          a.rng.seed,
          a.rng.offset,
          q.size(1),
          k.size(1),
          a.batch_stride(q.size(1), k.size(1)),
          a.row_stride(k.size(1))};
}

}  // namespace tandem::cuda::flash
