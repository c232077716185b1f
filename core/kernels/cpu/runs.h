// core/kernels/cpu/runs.h — a run of elements (what strided.h's loop hands out) as an Eigen array
// in the type the kernel computes in. float32 and float64 compute as themselves, read in place;
// bfloat16 and float16 compute in float32: a run is widened into a small per-thread buffer, and
// the result is computed into another and rounded once on the way out. So the elementwise kernels
// read and write 16-bit memory once, instead of going through float32 copies of whole tensors
// (widen.h, which the kernels without such a path use).
#pragma once

#include <tandem/core/kernels/cpu/eigen.h>
#include <type_traits>
#include <vector>

namespace tandem::cpu {

template <typename T>
inline constexpr bool is_16bit_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>;

/// The type a kernel computes T in.
template <typename T>
using compute_t = std::conditional_t<is_16bit_v<T>, float, T>;

/// Calls f with an Eigen expression, in compute_t<T>, of the n elements at p with stride s: a
/// constant for s = 0, a map for contiguous T that computes as itself, else a buffer (one per
/// operand slot and type, per thread) filled by gathering and widening.
template <int Slot, typename T, typename F>
void operand(const T* p, int64_t s, int64_t n, F&& f) {
  using C = compute_t<T>;
  if (s == 0) return f(Array1<C>::Constant(n, C(*p)));
  if constexpr (std::is_same_v<C, T>) {
    if (s == 1) return f(ConstArrayMap<T>(p, n));
  }
  thread_local std::vector<C> scratch;
  scratch.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) scratch[size_t(i)] = C(p[i * s]);
  f(ConstArrayMap<C>(scratch.data(), n));
}

/// compute(o) fills an Eigen array o of n compute_t<T> elements that end up at out (contiguous):
/// o maps out itself when T computes as itself, else a buffer rounded into out afterwards.
template <typename T, typename F>
void write_run(T* out, int64_t n, F&& compute) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<C, T>) {
    ArrayMap<T> o(out, n);
    compute(o);
  } else {
    thread_local std::vector<C> buffer;
    buffer.resize(size_t(n));
    ArrayMap<C> o(buffer.data(), n);
    compute(o);
    for (int64_t i = 0; i < n; ++i) out[i] = T(buffer[size_t(i)]);
  }
}

}  // namespace tandem::cpu
