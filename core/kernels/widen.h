// core/kernels/widen.h — how a kernel written for float32 serves the 16-bit types. A bfloat16 or
// float16 tensor is storage; its arithmetic happens in its accumulation dtype (core/dtype.h's
// table: float32). `widened<k>` wraps a kernel of the table so that every 16-bit operand is
// converted to float32 on the way in, the float32 kernel runs, and every 16-bit output is rounded
// back (to nearest even) on the way out. So sums, softmax, losses and their backwards accumulate
// in float32 and round once, as PyTorch's reduced-precision kernels do; the price is one extra
// pass over each 16-bit operand. Kernels with a genuine 16-bit path (the matrix products, copies,
// fills and comparisons) are registered without the wrapper.
//
//   .softmax_forward = widened<cpu::softmax_forward>,
//
// A call without 16-bit operands goes straight to the kernel.
#pragma once

#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tuple>
#include <utility>

namespace tandem::detail {

/// True for a defined tensor whose arithmetic runs in a wider dtype (bfloat16, float16).
inline bool computes_wider(const Tensor& t) {
  return t.defined() && accumulate_dtype(t.dtype()) != t.dtype();
}

/// `t` converted to its accumulation dtype on its device. Broadcast (stride-0) dims stay
/// broadcast: only the distinct elements are converted.
inline Tensor widen(const Tensor& t) {
  Shape compact = t.shape();
  Strides strides = t.strides();
  for (size_t d = 0; d < compact.size(); ++d)
    if (strides[d] == 0) compact[d] = 1;
  const Tensor src = as_strided(t, compact, strides, t.storage_offset());
  Tensor wide = empty(compact, {.dtype = accumulate_dtype(t.dtype()), .device = t.device()});
  kernels(t.device()).copy(src, wide);
  if (compact == t.shape()) return wide;
  Strides wide_strides = wide.strides();
  for (size_t d = 0; d < compact.size(); ++d)
    if (strides[d] == 0) wide_strides[d] = 0;
  return as_strided(wide, t.shape(), wide_strides, 0);
}

// One argument of a widened call. Anything but a tensor passes through.
template <typename A>
struct WidenArg {
  A value;
  explicit WidenArg(A v) : value(std::forward<A>(v)) {}
  A get() { return std::forward<A>(value); }
  void finish() {}
};

// An input: read through its float32 copy.
template <>
struct WidenArg<const Tensor&> {
  Tensor wide;
  explicit WidenArg(const Tensor& t) : wide(computes_wider(t) ? widen(t) : t) {}
  const Tensor& get() { return wide; }
  void finish() {}
};

// An output (or an in-place operand, so its contents are widened too): written through a float32
// copy, then rounded into the original.
template <>
struct WidenArg<Tensor&> {
  Tensor& original;
  Tensor wide;
  explicit WidenArg(Tensor& t) : original(t), wide(computes_wider(t) ? widen(t) : Tensor()) {}
  Tensor& get() { return wide.defined() ? wide : original; }
  void finish() {
    if (wide.defined()) kernels(original.device()).copy(wide, original);
  }
};

template <typename A>
bool is_wider_tensor(const A& a) {
  if constexpr (std::is_same_v<std::decay_t<A>, Tensor>) {
    return computes_wider(a);
  } else {
    return false;
  }
}

template <auto Kernel>
struct Widened;

template <typename... A, void (*Kernel)(A...)>
struct Widened<Kernel> {
  static void call(A... args) {
    if (!(is_wider_tensor(args) || ...)) return Kernel(std::forward<A>(args)...);
    std::tuple<WidenArg<A>...> wide{WidenArg<A>(std::forward<A>(args))...};
    std::apply([](auto&... w) { Kernel(w.get()...); }, wide);
    std::apply([](auto&... w) { (w.finish(), ...); }, wide);
  }
};

}  // namespace tandem::detail

namespace tandem {

/// `Kernel` with its 16-bit operands computed in float32 (see the top of this file).
template <auto Kernel>
inline constexpr auto widened = &detail::Widened<Kernel>::call;

}  // namespace tandem
