// core/kernels/cuda/pool.cu — max and average pooling over NCHW, one thread per output element,
// with cpu/pool.cpp's windows, tie and NaN rules and divisors. Max backward scatters dy to the
// argmax with atomics (windows overlap when stride < kernel); average backward gathers, each dx
// element summing the windows over it: no zeroing, no atomics, deterministic. A fused relu
// clamps the maximum and records index −1 where it is not > 0, which no input position matches.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

// Plane sizes and window parameters, passed by value to the kernels.
struct Geometry {
  int64_t planes, h, w, ho, wo;
  int64_t kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};

Geometry geometry(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  return {x.size(0) * x.size(1),
          x.size(2),
          x.size(3),
          y.size(2),
          y.size(3),
          p.kernel_h,
          p.kernel_w,
          p.stride_h,
          p.stride_w,
          p.pad_h,
          p.pad_w,
          p.count_include_pad};
}

__host__ __device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Divisor of output (oy, ox): the whole window (clipped to the padded input) with
// count_include_pad, else only its part inside the input.
__device__ inline int64_t window_size(const Geometry& g, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  if (g.count_include_pad)
    return (min64(y0 + g.kh, g.h + g.ph) - y0) * (min64(x0 + g.kw, g.w + g.pw) - x0);
  return (min64(y0 + g.kh, g.h) - max64(y0, 0)) * (min64(x0 + g.kw, g.w) - max64(x0, 0));
}

template <typename T>
__global__ void max_pool_forward_kernel(const T* x, T* y, int64_t* indices, Geometry g, bool relu) {
  TD_GRID_STRIDE_LOOP(i, g.planes * g.ho * g.wo) {
    const int64_t ox = i % g.wo, oy = (i / g.wo) % g.ho, q = i / (g.wo * g.ho);
    const T* in = x + q * g.h * g.w;
    // The window clipped to the input; padding never wins (it is never read).
    const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    const int64_t ya = max64(y0, 0), yb = min64(y0 + g.kh, g.h);
    const int64_t xa = max64(x0, 0), xb = min64(x0 + g.kw, g.w);
    int64_t where = ya * g.w + xa;
    T best = in[where];
    for (int64_t iy = ya; iy < yb; ++iy)
      for (int64_t ix = xa; ix < xb; ++ix) {
        const T v = in[iy * g.w + ix];
        if (v > best || v != v) {  // first maximum; NaN propagates (the last NaN, as on the CPU)
          best = v;
          where = iy * g.w + ix;
        }
      }
    const bool clamped = relu && !(best > T(0));  // relu's gradient is 0 there (NaN included)
    y[i] = relu && best < T(0) ? T(0) : best;
    indices[i] = clamped ? -1 : where;
  }
}

// Outputs o whose window [o·s − p, o·s − p + k) covers input position i: [lo, hi).
__device__ inline void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t n_out,
                                int64_t& lo, int64_t& hi) {
  const int64_t first = i + p - k + 1;  // o·s >= first
  lo = first <= 0 ? 0 : (first + s - 1) / s;
  hi = min64((i + p) / s + 1, n_out);  // o·s <= i + p
}

// dx gathers, for each input position, the dy of the windows whose argmax it was, in the CPU's
// order (output order): deterministic, unlike a scatter with atomicAdd.
template <typename T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* indices, T* dx, Geometry g) {
  TD_GRID_STRIDE_LOOP(i, g.planes * g.h * g.w) {
    const int64_t ix = i % g.w, iy = (i / g.w) % g.h, q = i / (g.w * g.h), here = iy * g.w + ix;
    const T* grad = dy + q * g.ho * g.wo;
    const int64_t* idx = indices + q * g.ho * g.wo;
    int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.kh, g.sh, g.ph, g.ho, oy0, oy1);
    covering(ix, g.kw, g.sw, g.pw, g.wo, ox0, ox1);
    T sum = 0;
    for (int64_t oy = oy0; oy < oy1; ++oy)
      for (int64_t ox = ox0; ox < ox1; ++ox)
        if (idx[oy * g.wo + ox] == here) sum += grad[oy * g.wo + ox];
    dx[i] = sum;
  }
}

template <typename T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, Geometry g) {
  TD_GRID_STRIDE_LOOP(i, g.planes * g.ho * g.wo) {
    const int64_t ox = i % g.wo, oy = (i / g.wo) % g.ho, q = i / (g.wo * g.ho);
    const T* in = x + q * g.h * g.w;
    const int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    const int64_t yb = min64(y0 + g.kh, g.h), xb = min64(x0 + g.kw, g.w);
    T sum = 0;
    for (int64_t iy = max64(y0, 0); iy < yb; ++iy)
      for (int64_t ix = max64(x0, 0); ix < xb; ++ix) sum += in[iy * g.w + ix];
    y[i] = sum / T(window_size(g, oy, ox));
  }
}

template <typename T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, Geometry g) {
  TD_GRID_STRIDE_LOOP(i, g.planes * g.h * g.w) {
    const int64_t ix = i % g.w, iy = (i / g.w) % g.h, q = i / (g.w * g.h);
    const T* grad = dy + q * g.ho * g.wo;
    int64_t oy0, oy1, ox0, ox1;
    covering(iy, g.kh, g.sh, g.ph, g.ho, oy0, oy1);
    covering(ix, g.kw, g.sw, g.pw, g.wo, ox0, ox1);
    T sum = 0;
    for (int64_t oy = oy0; oy < oy1; ++oy)
      for (int64_t ox = ox0; ox < ox1; ++ox)
        sum += grad[oy * g.wo + ox] / T(window_size(g, oy, ox));  // the CPU's share
    dx[i] = sum;
  }
}

}  // namespace

namespace {

// Both max poolings: with relu, the kernel clamps each window's max and records index −1 where it
// is not > 0 (the backward gather never matches −1).
void max_pool(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p, bool relu) {
  const Geometry g = geometry(x, y, p);
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    max_pool_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        x.data<T>(), y.data<T>(), indices.data<int64_t>(), g, relu);
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p) {
  max_pool(x, y, indices, p, /*relu=*/false);
}

void relu_max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p) {
  max_pool(x, y, indices, p, /*relu=*/true);
}

// dx[argmax] += dy, as a gather
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx,
                         const Pool2dParams& p) {
  const Geometry g = geometry(dx, dy, p);
  if (dx.numel() == 0) return;
  DeviceGuard guard(dx.device());
  dispatch_float(dy.dtype(), "max_pool2d_backward", [&]<typename T>() {
    const int64_t n = dx.numel();  // one thread per input element (a gather)
    max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        dy.data<T>(), indices.data<int64_t>(), dx.data<T>(), g);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
  const Geometry g = geometry(x, y, p);
  const int64_t n = y.numel();
  if (n == 0) return;
  DeviceGuard guard(y.device());
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    avg_pool_forward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream()>>>(x.data<T>(), y.data<T>(), g);
    TD_CUDA_CHECK_LAUNCH();
  });
}

// dx[window] += dy / window size, gathered per dx element
void avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
  const Geometry g = geometry(dx, dy, p);
  const int64_t n = dx.numel();
  if (n == 0) return;
  DeviceGuard guard(dx.device());
  dispatch_float(dy.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    avg_pool_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream()>>>(dy.data<T>(), dx.data<T>(), g);
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
