// core/kernels/cuda/device_math.cuh — float and double overloads of the device math functions
// (expf/exp, logf/log, ...), so that a kernel templated on T is written once for both.
#pragma once

#include <cstdint>

namespace tandem::cuda {

__device__ inline float d_exp(float v) { return expf(v); }
__device__ inline double d_exp(double v) { return exp(v); }
__device__ inline float d_log(float v) { return logf(v); }
__device__ inline double d_log(double v) { return log(v); }
__device__ inline float d_sqrt(float v) { return sqrtf(v); }
__device__ inline double d_sqrt(double v) { return sqrt(v); }
__device__ inline float d_abs(float v) { return fabsf(v); }
__device__ inline double d_abs(double v) { return fabs(v); }
__device__ inline int64_t d_abs(int64_t v) { return v < 0 ? -v : v; }
__device__ inline float d_tanh(float v) { return tanhf(v); }
__device__ inline double d_tanh(double v) { return tanh(v); }
__device__ inline float d_erf(float v) { return erff(v); }
__device__ inline double d_erf(double v) { return erf(v); }
__device__ inline float d_cos(float v) { return cosf(v); }
__device__ inline double d_cos(double v) { return cos(v); }
__device__ inline float d_pow(float a, float b) { return powf(a, b); }
__device__ inline double d_pow(double a, double b) { return pow(a, b); }
// max and min that are NaN when either operand is (torch.maximum, torch.amax, attention's running
// row maximum): std::max's `a < b ? b : a` keeps a NaN only in a, and fmax drops it.
template <typename T>
__device__ inline T d_max(T a, T b) {
  return (a < b || b != b) ? b : a;
}
template <typename T>
__device__ inline T d_min(T a, T b) {
  return (b < a || b != b) ? b : a;
}

}  // namespace tandem::cuda
