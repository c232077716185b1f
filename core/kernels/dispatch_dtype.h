// core/kernels/dispatch_dtype.h — runs a template lambda for the tensor's element type:
//   dispatch_float(x.dtype(), "relu_forward", [&]<typename T>() { ... });
// PyTorch's AT_DISPATCH_FLOATING_TYPES without the macro. Each dispatcher is a type list from
// core/dtype.h's table, so adding a dtype is adding it to the lists that support it; the error
// names the op, what it accepts and what it got. Compiles as host code under nvcc too.
#pragma once

#include <tandem/core/check.h>
#include <tandem/core/dtype.h>
#include <cstdint>
#include <string>

namespace tandem {

/// The types each kind of kernel is written for. Most kernels compute the 16-bit floating types
/// by widening whole tensors (kernels/widen.h); the CPU's elementwise kernels take them directly
/// (kernels/cpu/runs.h), through the *With16Bit lists.
using FloatTypes = TypeList<float, double>;
using NumericTypes = TypeList<float, double, int64_t>;
using FloatTypesWith16Bit = TypeList<float, double, BFloat16, Float16>;
using NumericTypesWith16Bit = TypeList<float, double, int64_t, BFloat16, Float16>;

namespace detail {

template <typename... T>
std::string type_names(TypeList<T...>) {
  std::string out;
  size_t i = 0;
  ((out += (i == 0                  ? ""
            : i + 1 == sizeof...(T) ? " or "
                                    : ", "),
    out += name(dtype_of<T>()), ++i),
   ...);
  return out;
}

// Calls f.operator()<T>() for the T of `t` among the list's types; false when none matches.
template <typename F, typename... T>
bool dispatch_in(DType t, F& f, TypeList<T...>) {
  return ((t == dtype_of<T>() ? (f.template operator()<T>(), true) : false) || ...);
}

}  // namespace detail

/// f.operator()<T>() for t's element type, which must be one of List's (DTypeError naming the op,
/// the accepted dtypes and t otherwise).
template <typename List, typename F>
void dispatch(DType t, const char* op, F&& f) {
  if (!detail::dispatch_in(t, f, List{}))
    detail::fail<DTypeError>(op, ": expected ", detail::type_names(List{}), ", but got ", t);
}

/// float32 and float64.
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  dispatch<FloatTypes>(t, op, f);
}

/// float32, float64 and int64.
template <typename F>
void dispatch_numeric(DType t, const char* op, F&& f) {
  dispatch<NumericTypes>(t, op, f);
}

/// Every dtype (copies, fills, comparisons, where: element moves and conversions through float).
template <typename F>
void dispatch_all(DType t, const char* op, F&& f) {
  dispatch<AllTypes>(t, op, f);
}

}  // namespace tandem
