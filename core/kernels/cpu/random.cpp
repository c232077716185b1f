// core/kernels/cpu/random.cpp — uniform and normal numbers from Philox (core/generator.h).
// Element i uses counter (state.offset + i), so the result does not depend on how the range is
// split over threads, and the CUDA kernels produce the very same numbers.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <cmath>

namespace tandem::cpu {
namespace {

// 24 random bits -> [0, 1) for float; 53 bits -> [0, 1) for double.
template <typename T>
T unit(const Philox4& r, int word) {
  if constexpr (std::is_same_v<T, float>) {
    return float(r.v[word] >> 8) * 0x1.0p-24f;
  } else {
    const uint64_t bits = (uint64_t(r.v[word]) << 32) | r.v[word + 1];
    return double(bits >> 11) * 0x1.0p-53;
  }
}

}  // namespace

void uniform(Tensor& out, double low, double high, GeneratorState state) {
  dispatch_float(out.dtype(), "uniform", [&]<typename T>() {
    T* p = out.data<T>();
    const T lo = T(low), span = T(high - low);
    detail::parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        p[i] = std::fma(span, unit<T>(philox(state.offset + uint64_t(i), state.seed), 0), lo);
    });
  });
}

void normal(Tensor& out, double mean, double std, GeneratorState state) {
  dispatch_float(out.dtype(), "normal", [&]<typename T>() {
    T* p = out.data<T>();
    const T m = T(mean), s = T(std);
    detail::parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        // Box–Muller: u1 in (0, 1] keeps the log finite.
        const Philox4 r = philox(state.offset + uint64_t(i), state.seed);
        const T u1 = T(1) - unit<T>(r, 0), u2 = unit<T>(r, 2);
        // Explicit fma, as in cuda/random.cu: the two sides round alike whatever compilers fuse.
        p[i] = std::fma(s * std::sqrt(T(-2) * std::log(u1)), std::cos(T(2 * M_PI) * u2), m);
      }
    });
  });
}

}  // namespace tandem::cpu
