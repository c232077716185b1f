// core/kernels/cuda/attention.cu — fused scaled-dot-product attention on CUDA, the algorithm of
// cpu/attention.cpp (FlashAttention's online softmax) with a warp per row: in the forward a warp
// per query row walks the keys 32 at a time (a lane per key for the scores, a lane per output
// column for the sums), keeping the row's running maximum and sum, and saves the output and the
// row's log-sum-exp; backward recomputes the probabilities from it, with a warp per query row for
// dQ and a warp per key row for dK and dV, each summing in a fixed order (no atomics: the same bits
// every run). Head dims up to 256 (a lane keeps 8 columns). cuDNN 9's fused attention needs the
// cudnn-frontend graph API, which the toolkit installed here does not ship, so this is Tandem's
// own.
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

  __device__ T score(int64_t batch, int64_t i, int64_t j) const {
    if (causal && j > i) return -std::numeric_limits<T>::infinity();
    const T* qi = q + (batch * tq + i) * d;
    const T* kj = k + (batch * tk + j) * d;
    T s = T(0);
    for (int64_t e = 0; e < d; ++e) s += qi[e] * kj[e];
    s *= scale;
    if (mask) s += mask[((mask_per_batch ? batch : 0) * tq + i) * tk + j];
    return s;
  }
  // keep/(1 − p) for element (batch, i, j): the counter rand() of [B, Tq, Tk] would use.
  __device__ T keep(int64_t batch, int64_t i, int64_t j) const {
    if (dropout_p <= T(0)) return T(1);
    const uint64_t at = uint64_t((batch * tq + i) * tk + j);
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
template <typename T>
__device__ T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}

// A warp per (batch, query row): the online softmax over the keys, 32 at a time.
template <typename T>
__global__ void attention_forward_kernel(Problem<T> p, T* out, T* lse) {
  const int lane = int(threadIdx.x % kWarp);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const T inf = std::numeric_limits<T>::infinity();
  for (int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < p.b * p.tq; row += warps) {
    const int64_t batch = row / p.tq, i = row - batch * p.tq, end = p.key_end(i);
    T m = -inf, l = T(0), o[kCols] = {};
    for (int64_t j0 = 0; j0 < end; j0 += kWarp) {
      const int64_t j = j0 + lane;
      const T s = j < end ? p.score(batch, i, j) : -inf;
      const T chunk_max = warp_max(s), mnew = m > chunk_max ? m : chunk_max;
      if (mnew == -inf) continue;  // nothing seen yet in this row
      const T alpha = d_exp(m - mnew), prob = s == -inf ? T(0) : d_exp(s - mnew);
      l = alpha * l + warp_sum(prob);
      m = mnew;
      const T dropped = j < end ? prob * p.keep(batch, i, j) : T(0);
      for (int c = 0; c < kCols; ++c) o[c] *= alpha;
      for (int t = 0; t < kWarp && j0 + t < end; ++t) {
        const T pt = __shfl_sync(0xffffffffu, dropped, t);
        const T* vr = p.v + (batch * p.tk + j0 + t) * p.dv;
        for (int c = 0; c < kCols; ++c)
          if (lane + c * kWarp < p.dv) o[c] += pt * vr[lane + c * kWarp];
      }
    }
    for (int c = 0; c < kCols; ++c)
      if (lane + c * kWarp < p.dv) out[row * p.dv + lane + c * kWarp] = l > T(0) ? o[c] / l : T(0);
    if (lane == 0) lse[row] = l > T(0) ? m + d_log(l) : -inf;
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

// P_ij, P_ij after dropout, and dS_ij = P_ij·(dP_ij·keep − D_i), dP_ij = dO_i·V_j.
template <typename T>
__device__ void gradients_at(const Problem<T>& p, const T* lse, const T* dout, const T* delta,
                             int64_t batch, int64_t i, int64_t j, T& dropped, T& ds) {
  const int64_t row = batch * p.tq + i;
  const T s = p.score(batch, i, j), l = lse[row];
  const T prob = (isinf(s) || isinf(l)) ? T(0) : d_exp(s - l);  // masked, or a row that saw none
  const T keep = p.keep(batch, i, j);
  const T* go = dout + row * p.dv;
  const T* vj = p.v + (batch * p.tk + j) * p.dv;
  T dp = T(0);
  for (int64_t c = 0; c < p.dv; ++c) dp += go[c] * vj[c];
  dropped = prob * keep;
  ds = prob * (dp * keep - delta[row]);
}

// dQ_i = Σ_j dS_ij·K_j·scale: a warp per (batch, query row), the keys in order.
template <typename T>
__global__ void attention_dq_kernel(Problem<T> p, const T* lse, const T* dout, const T* delta,
                                    T* dq) {
  const int lane = int(threadIdx.x % kWarp);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < p.b * p.tq; row += warps) {
    const int64_t batch = row / p.tq, i = row - batch * p.tq, end = p.key_end(i);
    T g[kCols] = {};
    for (int64_t j0 = 0; j0 < end; j0 += kWarp) {
      T dropped = T(0), ds = T(0);
      if (j0 + lane < end) gradients_at(p, lse, dout, delta, batch, i, j0 + lane, dropped, ds);
      for (int t = 0; t < kWarp && j0 + t < end; ++t) {
        const T dst = __shfl_sync(0xffffffffu, ds, t);
        const T* kr = p.k + (batch * p.tk + j0 + t) * p.d;
        for (int c = 0; c < kCols; ++c)
          if (lane + c * kWarp < p.d) g[c] += dst * kr[lane + c * kWarp];
      }
    }
    for (int c = 0; c < kCols; ++c)
      if (lane + c * kWarp < p.d) dq[row * p.d + lane + c * kWarp] = g[c] * p.scale;
  }
}

// dK_j = Σ_i dS_ij·Q_i·scale, dV_j = Σ_i P̃_ij·dO_i: a warp per (batch, key row), queries in order.
template <typename T>
__global__ void attention_dkdv_kernel(Problem<T> p, const T* lse, const T* dout, const T* delta,
                                      T* dk, T* dv) {
  const int lane = int(threadIdx.x % kWarp);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t col = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
       col < p.b * p.tk; col += warps) {
    const int64_t batch = col / p.tk, j = col - batch * p.tk;
    T gk[kCols] = {}, gv[kCols] = {};
    for (int64_t i0 = p.query_begin(j); i0 < p.tq; i0 += kWarp) {
      T dropped = T(0), ds = T(0);
      if (i0 + lane < p.tq) gradients_at(p, lse, dout, delta, batch, i0 + lane, j, dropped, ds);
      for (int t = 0; t < kWarp && i0 + t < p.tq; ++t) {
        const T pt = __shfl_sync(0xffffffffu, dropped, t), dst = __shfl_sync(0xffffffffu, ds, t);
        const T* qr = p.q + (batch * p.tq + i0 + t) * p.d;
        const T* gr = dout + (batch * p.tq + i0 + t) * p.dv;
        for (int c = 0; c < kCols; ++c) {
          if (lane + c * kWarp < p.d) gk[c] += dst * qr[lane + c * kWarp];
          if (lane + c * kWarp < p.dv) gv[c] += pt * gr[lane + c * kWarp];
        }
      }
    }
    for (int c = 0; c < kCols; ++c) {
      if (lane + c * kWarp < p.d) dk[col * p.d + lane + c * kWarp] = gk[c] * p.scale;
      if (lane + c * kWarp < p.dv) dv[col * p.dv + lane + c * kWarp] = gv[c];
    }
  }
}

template <typename T>
Problem<T> problem(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                   const AttentionParams& a) {
  TD_CHECK_VALUE(q.size(2) <= kCols * kWarp && v.size(2) <= kCols * kWarp,
                 "scaled_dot_product_attention: head dims up to ", kCols * kWarp,
                 " on CUDA, but q has ", q.size(2), " and v ", v.size(2));
  return {q.data<T>(),    k.data<T>(),
          v.data<T>(),    mask.defined() ? mask.data<T>() : nullptr,
          q.size(0),      q.size(1),
          k.size(1),      q.size(2),
          v.size(2),      mask.defined() && mask.size(0) > 1,
          T(a.scale),     a.causal,
          T(a.dropout_p), a.rng.seed,
          a.rng.offset};
}

unsigned warps_for(int64_t rows) { return blocks_for(rows * kWarp); }

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       const AttentionParams& a, Tensor& out, Tensor& lse) {
  if (q.size(0) * q.size(1) == 0) return;
  DeviceGuard guard(out.device());
  dispatch_float(q.dtype(), "scaled_dot_product_attention", [&]<typename T>() {
    const Problem<T> p = problem<T>(q, k, v, mask, a);
    attention_forward_kernel<T>
        <<<warps_for(p.b * p.tq), kThreads, 0, stream()>>>(p, out.data<T>(), lse.data<T>());
    TD_CUDA_CHECK_LAUNCH();
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
      attention_dq_kernel<T><<<warps_for(p.b * p.tq), kThreads, 0, stream()>>>(
          p, lse.data<T>(), dout.data<T>(), delta.data<T>(), dq.data<T>());
      TD_CUDA_CHECK_LAUNCH();
    }
    if (p.b * p.tk > 0) {
      attention_dkdv_kernel<T><<<warps_for(p.b * p.tk), kThreads, 0, stream()>>>(
          p, lse.data<T>(), dout.data<T>(), delta.data<T>(), dk.data<T>(), dv.data<T>());
      TD_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace tandem::cuda
