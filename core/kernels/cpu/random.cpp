// core/kernels/cpu/random.cpp — uniform and normal numbers from Philox (core/generator.h).
// Element i uses counter (state.offset + i), so the result does not depend on how the range is
// split over threads, and the CUDA kernels produce the very same numbers.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <cmath>

namespace tandem::cpu {
namespace {

template <typename T>
T unit(const Philox4& r, int word) {
  return philox_unit<T>(r, word);
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
