// core/kernels/cuda/softmax.cu — softmax and log_softmax over the last dim of a contiguous [M, K],
// the CUDA side of cpu/softmax.cpp: the row maximum is subtracted before exp. A warp per short
// row, a block per long one; each row is read in passes (max, sum, write) by the same threads.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <tandem/core/kernels/cuda/row_reduce.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

// The rows of group G: blockDim.x / G groups per block, each taking rows grid-stride.
template <int G>
__device__ int64_t first_row() {
  return blockIdx.x * int64_t(blockDim.x / G) + threadIdx.x / G;
}
template <int G>
__device__ int64_t row_step() {
  return int64_t(gridDim.x) * (blockDim.x / G);
}

template <int G, typename T>
__device__ T row_max(const T* x, int64_t k) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t c = threadIdx.x % G; c < k; c += G) mx = max_of(mx, x[c]);
  return group_reduce<G>(mx, MaxOp{});
}

// y = e^(x − max x) / Σ e^(x − max x)
template <int G, typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  for (int64_t r = first_row<G>(); r < m; r += row_step<G>()) {
    const T* xr = x + r * k;
    T* yr = y + r * k;
    const T mx = row_max<G>(xr, k);
    T s = T(0);
    for (int64_t c = lane; c < k; c += G) {
      const T e = d_exp(xr[c] - mx);
      yr[c] = e;  // read back below by this same thread
      s += e;
    }
    s = group_reduce<G>(s, SumOp{});
    for (int64_t c = lane; c < k; c += G) yr[c] = yr[c] / s;
  }
}

// y = x − max x − log Σ e^(x − max x)
template <int G, typename T>
__global__ void log_softmax_forward_kernel(const T* x, T* y, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  for (int64_t r = first_row<G>(); r < m; r += row_step<G>()) {
    const T* xr = x + r * k;
    T* yr = y + r * k;
    const T mx = row_max<G>(xr, k);
    T s = T(0);
    for (int64_t c = lane; c < k; c += G) s += d_exp(xr[c] - mx);
    const T log_sum = d_log(group_reduce<G>(s, SumOp{}));
    for (int64_t c = lane; c < k; c += G) yr[c] = (xr[c] - mx) - log_sum;
  }
}

// dx = y·(dy − Σ dy·y)
template <int G, typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  for (int64_t r = first_row<G>(); r < m; r += row_step<G>()) {
    const T *yr = y + r * k, *gr = dy + r * k;
    T* out = dx + r * k;
    T dot = T(0);
    for (int64_t c = lane; c < k; c += G) dot += gr[c] * yr[c];
    dot = group_reduce<G>(dot, SumOp{});
    for (int64_t c = lane; c < k; c += G) out[c] = yr[c] * (gr[c] - dot);
  }
}

// dx = dy − e^y·Σ dy
template <int G, typename T>
__global__ void log_softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t m, int64_t k) {
  const int lane = int(threadIdx.x % G);
  for (int64_t r = first_row<G>(); r < m; r += row_step<G>()) {
    const T *yr = y + r * k, *gr = dy + r * k;
    T* out = dx + r * k;
    T sum = T(0);
    for (int64_t c = lane; c < k; c += G) sum += gr[c];
    sum = group_reduce<G>(sum, SumOp{});
    for (int64_t c = lane; c < k; c += G) out[c] = gr[c] - d_exp(yr[c]) * sum;
  }
}

// [M, K] as the CPU sees it: the last dim is K (1 for a 0-d tensor).
struct RowShape {
  int64_t m, k;
  explicit RowShape(const Tensor& x) {
    k = x.dim() ? x.size(-1) : 1;
    m = k ? x.numel() / k : 0;
  }
};

// Calls launch.template operator()<G>(grid) with a warp (G = 32) or a block (G = kThreads) per
// row, on `out`'s device, and checks the launch.
template <typename F>
void launch_rows(const Tensor& out, RowShape s, F&& launch) {
  if (s.m == 0) return;
  DeviceGuard guard(out.device());
  if (s.k <= kWarpRowMax)
    launch.template operator()<kWarp>(blocks_for(s.m * kWarp));
  else
    launch.template operator()<kThreads>(unsigned(std::min<int64_t>(s.m, 65535 * 8)));
  TD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), "softmax", [&]<typename T>() {
    const RowShape s(x);
    launch_rows(y, s, [&]<int G>(unsigned grid) {
      softmax_forward_kernel<G, T>
          <<<grid, kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), s.m, s.k);
    });
  });
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "softmax_backward", [&]<typename T>() {
    const RowShape s(y);
    launch_rows(dx, s, [&]<int G>(unsigned grid) {
      softmax_backward_kernel<G, T>
          <<<grid, kThreads, 0, stream()>>>(y.data<T>(), dy.data<T>(), dx.data<T>(), s.m, s.k);
    });
  });
}

void log_softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), "log_softmax", [&]<typename T>() {
    const RowShape s(x);
    launch_rows(y, s, [&]<int G>(unsigned grid) {
      log_softmax_forward_kernel<G, T>
          <<<grid, kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), s.m, s.k);
    });
  });
}

void log_softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "log_softmax_backward", [&]<typename T>() {
    const RowShape s(y);
    launch_rows(dx, s, [&]<int G>(unsigned grid) {
      log_softmax_backward_kernel<G, T>
          <<<grid, kThreads, 0, stream()>>>(y.data<T>(), dy.data<T>(), dx.data<T>(), s.m, s.k);
    });
  });
}

}  // namespace tandem::cuda
