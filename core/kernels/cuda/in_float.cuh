// core/kernels/cuda/in_float.cuh — an elementwise functor written for float that serves the
// 16-bit types inside its one kernel: a BFloat16 or Float16 element is read as float, the functor
// computes in float and an arithmetic result is rounded once (to nearest even) on the way out. The
// numbers are widen.h's (float32 arithmetic, one rounding), without its whole-tensor copies: a
// widened 16-bit op read and wrote each operand twice more than the kernel did, and under autocast
// those passes were a large share of a GPT step's elementwise time.
//
//   run_unary<T>(x, y, InFloat<UnaryFn<UnaryOp::Gelu>>{});
#pragma once

#include <tandem/core/float16.h>
#include <type_traits>

namespace tandem::cuda {

template <typename T>
inline constexpr bool kIs16Bit = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

/// The type a kernel computes T in: float for the 16-bit types, else T (cpu/runs.h's compute_t).
template <typename T>
using compute_t = std::conditional_t<kIs16Bit<T>, float, T>;

template <typename Fn>
struct InFloat {
  Fn fn;

  template <typename T>
  __device__ auto operator()(T a) const {
    if constexpr (kIs16Bit<T>) {
      return rounded<T>(fn(float(a)));
    } else {
      return fn(a);
    }
  }
  template <typename T>
  __device__ auto operator()(T a, T b) const {
    if constexpr (kIs16Bit<T>) {
      return rounded<T>(fn(float(a), float(b)));
    } else {
      return fn(a, b);
    }
  }

 private:
  // A float result back to the operands' 16-bit type; a comparison's bool stays a bool.
  template <typename T, typename R>
  __device__ static auto rounded(R r) {
    if constexpr (std::is_same_v<R, float>) {
      return T(r);
    } else {
      return r;
    }
  }
};

}  // namespace tandem::cuda
