// core/kernels/cuda/norm.cu — layer norm over the last dim of a contiguous [M, K], the CUDA side of
// cpu/norm.cpp: a group of G threads per row (a warp for rows up to kWarpRowMax, a block for
// longer) computes mean and rstd and writes y; backward writes dx the same way, and dw and db with
// one thread per column summing the rows in order (the same bits run after run).
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <tandem/core/kernels/cuda/row_reduce.cuh>

namespace tandem::cuda {
namespace {

__device__ inline float d_rsqrt(float v) { return rsqrtf(v); }
__device__ inline double d_rsqrt(double v) { return rsqrt(v); }

template <int G, typename T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T eps, T* y, T* mean,
                                          T* rstd, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  const int64_t first = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  for (int64_t r = first; r < m; r += int64_t(gridDim.x) * (blockDim.x / G)) {
    const T* in = x + r * k;
    T s = T(0);
    for (int64_t j = lane; j < k; j += G) s += in[j];
    const T mu = group_reduce<G>(s, SumOp{}) / T(k);
    T v = T(0);
    for (int64_t j = lane; j < k; j += G) v += (in[j] - mu) * (in[j] - mu);
    const T rs = d_rsqrt(group_reduce<G>(v, SumOp{}) / T(k) + eps);
    T* out = y + r * k;
    for (int64_t j = lane; j < k; j += G) {
      T o = (in[j] - mu) * rs;
      if (w) o *= w[j];
      if (b) o += b[j];
      out[j] = o;
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·w, x̂ = (x − mean)·rstd
template <int G, typename T>
__global__ void layer_norm_dx_kernel(const T* x, const T* w, const T* mean, const T* rstd,
                                     const T* dy, T* dx, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  const int64_t first = blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
  for (int64_t r = first; r < m; r += int64_t(gridDim.x) * (blockDim.x / G)) {
    const T *in = x + r * k, *d = dy + r * k;
    const T mu = mean[r], rs = rstd[r];
    T sg = T(0), sgx = T(0);
    for (int64_t j = lane; j < k; j += G) {
      const T g = w ? d[j] * w[j] : d[j];
      sg += g;
      sgx += g * (in[j] - mu) * rs;
    }
    const T g_mean = group_reduce<G>(sg, SumOp{}) / T(k);
    const T gx_mean = group_reduce<G>(sgx, SumOp{}) / T(k);
    for (int64_t j = lane; j < k; j += G) {
      const T g = w ? d[j] * w[j] : d[j];
      dx[r * k + j] = rs * (g - g_mean - (in[j] - mu) * rs * gx_mean);
    }
  }
}

// dw[j] = Σ_r dy[r, j]·x̂[r, j], db[j] = Σ_r dy[r, j]: a thread per column, rows in order.
template <typename T>
__global__ void layer_norm_dwdb_kernel(const T* x, const T* mean, const T* rstd, const T* dy, T* dw,
                                       T* db, int64_t m, int64_t k) {
  TD_GRID_STRIDE_LOOP(j, k) {
    T sw = T(0), sb = T(0);
    for (int64_t r = 0; r < m; ++r) {
      const T d = dy[r * k + j];
      sw += d * (x[r * k + j] - mean[r]) * rstd[r];
      sb += d;
    }
    if (dw) dw[j] = sw;
    if (db) db[j] = sb;
  }
}

template <typename T>
const T* maybe(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <typename T>
T* maybe_out(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Launches a row kernel with a warp per row for short rows, a block per row for long ones.
template <typename Launch>
void by_rows(int64_t m, int64_t k, Launch launch) {
  if (k <= kWarpRowMax)
    launch.template operator()<kWarp>(blocks_for(m * kWarp));
  else
    launch.template operator()<kThreads>(unsigned(std::min<int64_t>(m, 65535 * 8)));
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  const int64_t k = x.size(-1), m = k ? x.numel() / k : 0;
  if (m == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    by_rows(m, k, [&]<int G>(unsigned grid) {
      layer_norm_forward_kernel<G, T>
          <<<grid, kThreads, 0, stream()>>>(x.data<T>(), maybe<T>(w), maybe<T>(b), T(eps),
                                            y.data<T>(), mean.data<T>(), rstd.data<T>(), m, k);
    });
    TD_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  const int64_t k = x.size(-1), m = k ? x.numel() / k : 0;
  DeviceGuard guard(dx.device());
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    if (m > 0) {
      by_rows(m, k, [&]<int G>(unsigned grid) {
        layer_norm_dx_kernel<G, T>
            <<<grid, kThreads, 0, stream()>>>(x.data<T>(), maybe<T>(w), mean.data<T>(),
                                              rstd.data<T>(), dy.data<T>(), dx.data<T>(), m, k);
      });
      TD_CUDA_CHECK_LAUNCH();
    }
    if ((dw.defined() || db.defined()) && k > 0) {
      layer_norm_dwdb_kernel<T><<<blocks_for(k), kThreads, 0, stream()>>>(
          x.data<T>(), mean.data<T>(), rstd.data<T>(), dy.data<T>(), maybe_out<T>(dw),
          maybe_out<T>(db), m, k);
      TD_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace tandem::cuda
