// core/dtype.h — element types. float32 for training, float64 for gradient checks, int64 for labels
// and indices, bool for masks and comparisons.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace tandem {

enum class DType : int8_t { f32, f64, i64, b8 };

// PyTorch-style spellings.
inline constexpr DType kFloat32 = DType::f32;
inline constexpr DType kFloat64 = DType::f64;
inline constexpr DType kInt64 = DType::i64;
inline constexpr DType kBool = DType::b8;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
    case DType::b8:
      return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::f64; }

/// "float32", "float64", "int64", "bool".
std::string_view name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

/// The DType of a C++ element type: dtype_of<float> == DType::f32.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::b8;
}

}  // namespace tandem
