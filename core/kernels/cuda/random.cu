// core/kernels/cuda/random.cu — uniform and normal numbers from Philox (core/generator.h) on CUDA,
// and arange. Element i uses counter (state.offset + i) and the same bit-to-float conversions and
// Box–Muller as cpu/random.cpp, so cuda:N gives the CPU's numbers (up to libm's log and cos).
#include <tandem/core/cuda_device.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cmath>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <type_traits>

namespace tandem::cuda {
namespace {

// 24 random bits -> [0, 1) for float; 53 for double: core/generator.h's, as the CPU's unit().
template <typename T>
__device__ T unit(const Philox4& r, int word) {
  return philox_unit<T>(r, word);
}

// The expressions below are the CPU's, with the multiply-adds written as explicit fma on both
// sides, so the results agree bit for bit (where libm is not involved) whatever either compiler
// would contract on its own.
template <typename T>
__global__ void uniform_kernel(T* p, int64_t n, T lo, T span, uint64_t offset, uint64_t seed) {
  TD_GRID_STRIDE_LOOP(i, n) p[i] = fma(span, unit<T>(philox(offset + uint64_t(i), seed), 0), lo);
}

template <typename T>
__global__ void normal_kernel(T* p, int64_t n, T m, T s, uint64_t offset, uint64_t seed) {
  TD_GRID_STRIDE_LOOP(i, n) {
    // Box–Muller: u1 in (0, 1] keeps the log finite.
    const Philox4 r = philox(offset + uint64_t(i), seed);
    const T u1 = T(1) - unit<T>(r, 0), u2 = unit<T>(r, 2);
    p[i] = fma(s * d_sqrt(T(-2) * d_log(u1)), d_cos(T(2 * M_PI) * u2), m);
  }
}

template <typename T>
__global__ void arange_kernel(T* p, int64_t n, double start, double step) {
  TD_GRID_STRIDE_LOOP(i, n) p[i] = static_cast<T>(fma(double(i), step, start));
}

}  // namespace

void uniform(Tensor& out, double low, double high, GeneratorState state) {
  check_output(out, "uniform");
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "uniform", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    uniform_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
        out.data<T>(), n, T(low), T(high - low), state.offset, state.seed);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void normal(Tensor& out, double mean, double std, GeneratorState state) {
  check_output(out, "normal");
  DeviceGuard guard(out.device());
  dispatch_float(out.dtype(), "normal", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    normal_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out.data<T>(), n, T(mean), T(std),
                                                            state.offset, state.seed);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void arange(Tensor& out, double start, double step) {
  check_output(out, "arange");
  DeviceGuard guard(out.device());
  dispatch_numeric(out.dtype(), "arange", [&]<typename T>() {
    const int64_t n = out.numel();
    if (n == 0) return;
    arange_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(out.data<T>(), n, start, step);
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tandem::cuda
