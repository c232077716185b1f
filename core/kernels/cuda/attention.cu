// core/kernels/cuda/attention.cu — fused scaled-dot-product attention on CUDA, the algorithm of
// cpu/attention.cpp (FlashAttention's online softmax) with a warp per row: in the forward a warp
// per query row walks the keys 32 at a time (a lane per key for the scores, a lane per output
// column for the sums), keeping the row's running maximum and sum, and saves the output and the
// row's log-sum-exp; backward recomputes the probabilities from it, with a warp per query row for
// dQ and a warp per key row for dK and dV, each summing in a fixed order (no atomics: the same bits
// every run). Head dims up to 256 (a lane keeps 8 columns). A block is 8 warps on 8 neighbouring
// rows of one batch, which read the same 32 rows of the other side at a time: those are staged
// once in shared memory, each row padded by one element so that 32 lanes reading 32 rows at one
// column hit 32 banks (read from global memory, a lane per row, each such load took 32
// transactions, and the first version spent most of its time there). cuDNN 9's fused attention
// needs the cudnn-frontend graph API, which the toolkit installed here does not ship, so this is
// Tandem's own.
#include <tandem/core/cuda_device.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

constexpr int kCols = 8;  // output columns per lane: head dims up to 32·8 = 256

template <typename T>
struct Problem {
  const T *q, *k, *v, *mask;
  int64_t b, tq, tk, d, dv;
  bool mask_per_batch;
  T scale;
  bool causal;
  T dropout_p;
  uint64_t seed, offset;
  int64_t batch_stride, row_stride;  // of the dropout counters (AttentionParams)

  // The score of (i, j) from the dot product q_i·k_j: scaled, masked.
  __device__ T score_of(T dot, int64_t batch, int64_t i, int64_t j) const {
    if (causal && j > i) return -std::numeric_limits<T>::infinity();
    T s = dot * scale;
    if (mask) s += mask[((mask_per_batch ? batch : 0) * tq + i) * tk + j];
    return s;
  }
  // keep/(1 − p) for element (batch, i, j): the counter rand() of [B, Tq, Tk] would use (or
  // of the longer sequence the strides say).
  __device__ T keep(int64_t batch, int64_t i, int64_t j) const {
    if (dropout_p <= T(0)) return T(1);
    const uint64_t at = uint64_t(batch * batch_stride + i * row_stride + j);
    return philox_unit<T>(philox(offset + at, seed), 0) >= dropout_p ? T(1) / (T(1) - dropout_p)
                                                                     : T(0);
  }
  __device__ int64_t key_end(int64_t i) const { return causal ? (i + 1 < tk ? i + 1 : tk) : tk; }
  __device__ int64_t query_begin(int64_t j) const { return causal ? (j < tq ? j : tq) : 0; }
};

template <typename T>
__device__ T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// NaN in every lane if a lane holds one (`other > v` dropped it: a row of NaN scores then passed
// for a row that saw no key, and its output for zeros).
template <typename T>
__device__ T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = d_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Rows per block: a warp each.
constexpr int kRows = kThreads / kWarp;

// A block's shared memory: `a` and `b`, 32 rows of the other side's two matrices (widths da and
// db, each row padded by one), and `wa`, `wb`, one row of this side's two matrices per warp.
template <typename T>
struct Tiles {
  T *a, *b, *wa, *wb;
  int64_t da, db;
  __device__ const T* a_row(int r) const { return a + r * (da + 1); }
  __device__ const T* b_row(int r) const { return b + r * (db + 1); }
};

template <typename T>
size_t tiles_bytes(int64_t da, int64_t db) {
  return sizeof(T) * size_t(kWarp * (da + 1) + kWarp * (db + 1) + kRows * (da + db));
}

template <typename T>
__device__ Tiles<T> tiles(unsigned char* memory, int64_t da, int64_t db) {
  T* a = reinterpret_cast<T*>(memory);
  T* b = a + kWarp * (da + 1);
  T* wa = b + kWarp * (db + 1);
  return {a, b, wa, wa + kRows * da, da, db};
}

// Every thread of the block: rows [first, first + 32) of src [rows, width] into tile (width + 1
// apart), zeros past the last row.
template <typename T>
__device__ void load_tile(T* tile, const T* src, int64_t first, int64_t rows, int64_t width) {
  for (int64_t x = threadIdx.x; x < kWarp * width; x += blockDim.x) {
    const int64_t r = x / width, c = x - r * width;
    tile[r * (width + 1) + c] = first + r < rows ? src[(first + r) * width + c] : T(0);
  }
}

// One warp: row `row` of src [*, width] into dst.
template <typename T>
__device__ void load_row(T* dst, const T* src, int64_t row, int64_t width, int lane) {
  for (int64_t c = lane; c < width; c += kWarp) dst[c] = src[row * width + c];
}

template <typename T>
__device__ T dot(const T* a, const T* b, int64_t n) {
  T s = T(0);
  for (int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// The blocks for `rows` rows per batch, kRows a block.
unsigned blocks_for_rows(int64_t batches, int64_t rows) {
  return unsigned(std::clamp<int64_t>(batches * ((rows + kRows - 1) / kRows), 1, 65535 * 8));
}

// A warp per (batch, query row): the online softmax over the keys, 32 at a time (K and V staged).
template <typename T>
__global__ void attention_forward_kernel(Problem<T> p, T* out, T* lse) {
  extern __shared__ __align__(16) unsigned char shared[];
  const Tiles<T> s = tiles<T>(shared, p.d, p.dv);  // a: K, b: V, wa: q
  const int lane = int(threadIdx.x % kWarp), w = int(threadIdx.x / kWarp);
  const int64_t groups = (p.tq + kRows - 1) / kRows;
  const T inf = std::numeric_limits<T>::infinity();
  T* q = s.wa + w * p.d;
  for (int64_t g = blockIdx.x; g < p.b * groups; g += gridDim.x) {
    const int64_t batch = g / groups, first = (g - batch * groups) * kRows, i = first + w;
    const bool active = i < p.tq;
    const int64_t end = active ? p.key_end(i) : 0;
    const int64_t block_end = p.key_end((first + kRows < p.tq ? first + kRows : p.tq) - 1);
    __syncthreads();  // the last group's readers are done with q
    if (active) load_row(q, p.q + batch * p.tq * p.d, i, p.d, lane);
    T m = -inf, l = T(0), o[kCols] = {};
    for (int64_t j0 = 0; j0 < block_end; j0 += kWarp) {
      __syncthreads();
      load_tile(s.a, p.k + batch * p.tk * p.d, j0, p.tk, p.d);
      load_tile(s.b, p.v + batch * p.tk * p.dv, j0, p.tk, p.dv);
      __syncthreads();
      if (j0 >= end) continue;  // the whole warp: this row's keys are done
      const int64_t j = j0 + lane;
      const T sc = j < end ? p.score_of(dot(q, s.a_row(lane), p.d), batch, i, j) : -inf;
      // d_max: a NaN m stays NaN (`m > chunk_max ? m : chunk_max` dropped it).
      const T chunk_max = warp_max(sc), mnew = d_max(m, chunk_max);
      if (mnew == -inf) continue;  // nothing seen yet in this row
      const T alpha = d_exp(m - mnew), prob = sc == -inf ? T(0) : d_exp(sc - mnew);
      l = alpha * l + warp_sum(prob);
      m = mnew;
      const T dropped = j < end ? prob * p.keep(batch, i, j) : T(0);
      for (int c = 0; c < kCols; ++c) o[c] *= alpha;
      for (int t = 0; t < kWarp && j0 + t < end; ++t) {
        const T pt = __shfl_sync(0xffffffffu, dropped, t);
        const T* vr = s.b_row(t);
        for (int c = 0; c < kCols; ++c)
          if (lane + c * kWarp < p.dv) o[c] += pt * vr[lane + c * kWarp];
      }
    }
    if (!active) continue;
    const int64_t row = batch * p.tq + i;
    // l = 0: the row saw no key (all masked), output 0; a NaN l (not `l > 0`) gives NaN.
    for (int c = 0; c < kCols; ++c)
      if (lane + c * kWarp < p.dv) out[row * p.dv + lane + c * kWarp] = l == T(0) ? T(0) : o[c] / l;
    if (lane == 0) lse[row] = l == T(0) ? -inf : m + d_log(l);
  }
}

// D_i = Σ dO_i·O_i, a warp per row.
template <typename T>
__global__ void attention_delta_kernel(const T* out, const T* dout, T* delta, int64_t rows,
                                       int64_t dv) {
  const int lane = int(threadIdx.x % kWarp);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t r = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp; r < rows;
       r += warps) {
    T s = T(0);
    for (int64_t c = lane; c < dv; c += kWarp) s += out[r * dv + c] * dout[r * dv + c];
    s = warp_sum(s);
    if (lane == 0) delta[r] = s;
  }
}

// From q_i·k_j and dP_ij = dO_i·V_j: P_ij after dropout, and dS_ij = P_ij·(dP_ij·keep − D_i).
template <typename T>
__device__ void gradients_from(const Problem<T>& p, T l, T delta, int64_t batch, int64_t i,
                               int64_t j, T qk, T dp, T& dropped, T& ds) {
  const T s = p.score_of(qk, batch, i, j);
  // A row that saw no key: 0. A masked key (s = −∞) gives e^−∞ = 0, and a NaN row (l NaN) NaN.
  const T prob = l == -std::numeric_limits<T>::infinity() ? T(0) : d_exp(s - l);
  const T keep = p.keep(batch, i, j);
  dropped = prob * keep;
  ds = prob * (dp * keep - delta);
}

// dQ_i = Σ_j dS_ij·K_j·scale: a warp per (batch, query row), the keys in order (K, V staged).
template <typename T>
__global__ void attention_dq_kernel(Problem<T> p, const T* lse, const T* dout, const T* delta,
                                    T* dq) {
  extern __shared__ __align__(16) unsigned char shared[];
  const Tiles<T> s = tiles<T>(shared, p.d, p.dv);  // a: K, b: V, wa: q, wb: dO
  const int lane = int(threadIdx.x % kWarp), w = int(threadIdx.x / kWarp);
  const int64_t groups = (p.tq + kRows - 1) / kRows;
  T *q = s.wa + w * p.d, *go = s.wb + w * p.dv;
  for (int64_t g = blockIdx.x; g < p.b * groups; g += gridDim.x) {
    const int64_t batch = g / groups, first = (g - batch * groups) * kRows, i = first + w;
    const bool active = i < p.tq;
    const int64_t end = active ? p.key_end(i) : 0, row = batch * p.tq + i;
    const int64_t block_end = p.key_end((first + kRows < p.tq ? first + kRows : p.tq) - 1);
    __syncthreads();
    if (active) {
      load_row(q, p.q + batch * p.tq * p.d, i, p.d, lane);
      load_row(go, dout + batch * p.tq * p.dv, i, p.dv, lane);
    }
    T g_[kCols] = {};
    for (int64_t j0 = 0; j0 < block_end; j0 += kWarp) {
      __syncthreads();
      load_tile(s.a, p.k + batch * p.tk * p.d, j0, p.tk, p.d);
      load_tile(s.b, p.v + batch * p.tk * p.dv, j0, p.tk, p.dv);
      __syncthreads();
      if (j0 >= end) continue;
      T dropped = T(0), ds = T(0);
      if (j0 + lane < end)
        gradients_from(p, lse[row], delta[row], batch, i, j0 + lane, dot(q, s.a_row(lane), p.d),
                       dot(go, s.b_row(lane), p.dv), dropped, ds);
      for (int t = 0; t < kWarp && j0 + t < end; ++t) {
        const T dst = __shfl_sync(0xffffffffu, ds, t);
        const T* kr = s.a_row(t);
        for (int c = 0; c < kCols; ++c)
          if (lane + c * kWarp < p.d) g_[c] += dst * kr[lane + c * kWarp];
      }
    }
    if (!active) continue;
    for (int c = 0; c < kCols; ++c)
      if (lane + c * kWarp < p.d) dq[row * p.d + lane + c * kWarp] = g_[c] * p.scale;
  }
}

// dK_j = Σ_i dS_ij·Q_i·scale, dV_j = Σ_i P̃_ij·dO_i: a warp per (batch, key row), queries in order
// (Q and dO staged).
template <typename T>
__global__ void attention_dkdv_kernel(Problem<T> p, const T* lse, const T* dout, const T* delta,
                                      T* dk, T* dv) {
  extern __shared__ __align__(16) unsigned char shared[];
  const Tiles<T> s = tiles<T>(shared, p.d, p.dv);  // a: Q, b: dO, wa: k, wb: v
  const int lane = int(threadIdx.x % kWarp), w = int(threadIdx.x / kWarp);
  const int64_t groups = (p.tk + kRows - 1) / kRows;
  T *k = s.wa + w * p.d, *v = s.wb + w * p.dv;
  for (int64_t g = blockIdx.x; g < p.b * groups; g += gridDim.x) {
    const int64_t batch = g / groups, first = (g - batch * groups) * kRows, j = first + w;
    const bool active = j < p.tk;
    // Rows before a key's first query contribute exact zeros (masked), so the block starts at
    // its first key's.
    const int64_t begin = p.query_begin(first);
    __syncthreads();
    if (active) {
      load_row(k, p.k + batch * p.tk * p.d, j, p.d, lane);
      load_row(v, p.v + batch * p.tk * p.dv, j, p.dv, lane);
    }
    T gk[kCols] = {}, gv[kCols] = {};
    for (int64_t i0 = begin; i0 < p.tq; i0 += kWarp) {
      __syncthreads();
      load_tile(s.a, p.q + batch * p.tq * p.d, i0, p.tq, p.d);
      load_tile(s.b, dout + batch * p.tq * p.dv, i0, p.tq, p.dv);
      __syncthreads();
      if (!active) continue;
      T dropped = T(0), ds = T(0);
      const int64_t i = i0 + lane, row = batch * p.tq + i;
      if (i < p.tq)
        gradients_from(p, lse[row], delta[row], batch, i, j, dot(k, s.a_row(lane), p.d),
                       dot(s.b_row(lane), v, p.dv), dropped, ds);
      for (int t = 0; t < kWarp && i0 + t < p.tq; ++t) {
        const T pt = __shfl_sync(0xffffffffu, dropped, t), dst = __shfl_sync(0xffffffffu, ds, t);
        const T *qr = s.a_row(t), *gr = s.b_row(t);
        for (int c = 0; c < kCols; ++c) {
          if (lane + c * kWarp < p.d) gk[c] += dst * qr[lane + c * kWarp];
          if (lane + c * kWarp < p.dv) gv[c] += pt * gr[lane + c * kWarp];
        }
      }
    }
    if (!active) continue;
    const int64_t col = batch * p.tk + j;
    for (int c = 0; c < kCols; ++c) {
      if (lane + c * kWarp < p.d) dk[col * p.d + lane + c * kWarp] = gk[c] * p.scale;
      if (lane + c * kWarp < p.dv) dv[col * p.dv + lane + c * kWarp] = gv[c];
    }
  }
}

// Launches `kernel` over `blocks` with the tiles' shared memory (opting in past 48 KB: head dims
// over 96 in double).
template <typename T, typename Kernel, typename... Args>
void launch_tiled(Kernel kernel, unsigned blocks, const Problem<T>& p, Args... args) {
  const size_t bytes = tiles_bytes<T>(p.d, p.dv);
  if (bytes > 48 * 1024)
    TD_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  kernel<<<blocks, kThreads, bytes, stream()>>>(p, args...);
  TD_CUDA_CHECK_LAUNCH();
}

template <typename T>
Problem<T> problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   const AttentionParams& a) {
  TD_CHECK_VALUE(q.size(2) <= kCols * kWarp && v.size(2) <= kCols * kWarp,
                 "scaled_dot_product_attention: head dims up to ", kCols * kWarp,
                 " on CUDA, but q has ", q.size(2), " and v ", v.size(2));
  return {q.data<T>(),
          k.data<T>(),
          v.data<T>(),
          mask.defined() ? mask.data<T>() : nullptr,
          q.size(0),
          q.size(1),
          k.size(1),
          q.size(2),
          v.size(2),
          mask.defined() && mask.size(0) > 1,
          T(a.scale),
          a.causal,
          T(a.dropout_p),
          a.rng.seed,
          a.rng.offset,
          a.batch_stride(q.size(1), k.size(1)),
          a.row_stride(k.size(1))};
}

unsigned warps_for(int64_t rows) { return blocks_for(rows * kWarp); }

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionParams& a, Tensor& out, Tensor& lse) {
  if (q.size(0) * q.size(1) == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    const Problem<T> p = problem<T>(q, k, v, mask, a);
    launch_tiled(attention_forward_kernel<T>, blocks_for_rows(p.b, p.tq), p, out.data<T>(),
                 lse.data<T>());
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                        const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const AttentionParams& a, Tensor& dq, Tensor& dk, Tensor& dv) {
  DeviceGuard guard(dq.device());
  dispatch_float(q.dtype(), "scaled_dot_product_attention_backward", [&]<typename T>() {
    const Problem<T> p = problem<T>(q, k, v, mask, a);
    Tensor delta = empty({std::max<int64_t>(p.b * p.tq, 1)}, out.options());
    if (p.b * p.tq > 0) {
      attention_delta_kernel<T><<<warps_for(p.b * p.tq), kThreads, 0, stream()>>>(
          out.data<T>(), dout.data<T>(), delta.data<T>(), p.b * p.tq, p.dv);
      TD_CUDA_CHECK_LAUNCH();
      launch_tiled(attention_dq_kernel<T>, blocks_for_rows(p.b, p.tq), p, lse.data<T>(),
                   dout.data<T>(), delta.data<T>(), dq.data<T>());
    }
    if (p.b * p.tk > 0) {
      launch_tiled(attention_dkdv_kernel<T>, blocks_for_rows(p.b, p.tk), p, lse.data<T>(),
                   dout.data<T>(), delta.data<T>(), dk.data<T>(), dv.data<T>());
    }
  });
}

}  // namespace tandem::cuda
