// core/dtype.h — element types, described once in a table (kDTypes) that everything else reads:
// sizes, names, which are floating, their safetensors names, what they accumulate in, and their
// NCCL type; the kernel dispatchers (kernels/dispatch_dtype.h) are generated from the type list
// beside it. float32 trains, float64 checks gradients, bfloat16 and float16 are the 16-bit storage
// types of mixed precision (core/float16.h), int64 holds labels and indices, bool masks.
#pragma once

#include <tandem/core/float16.h>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace tandem {

// The order is the table's order.
enum class DType : int8_t { f32, f64, i64, b8, bf16, f16 };

// PyTorch-style spellings.
inline constexpr DType kFloat32 = DType::f32;
inline constexpr DType kFloat64 = DType::f64;
inline constexpr DType kInt64 = DType::i64;
inline constexpr DType kBool = DType::b8;
inline constexpr DType kBFloat16 = DType::bf16;
inline constexpr DType kFloat16 = DType::f16;

struct DTypeInfo {
  DType dtype;
  std::string_view name;  // as PyTorch prints it, without "torch."
  size_t size;            // bytes per element
  bool is_floating;
  std::string_view safetensors;  // the dtype's name in a safetensors header
  // The reference writer orders a file's tensors by its Dtype enum, descending; this is the
  // position in that enum among the dtypes Tandem has (I64 > F64 > F32 > BF16 > F16 > BOOL).
  int safetensors_rank;
  DType accumulate;  // sums and products of this type are computed in this one
  int nccl;  // the ncclDataType_t value (checked against nccl.h where NCCL is built); -1: none
};

inline constexpr DTypeInfo kDTypes[] = {
    {DType::f32, "float32", 4, true, "F32", 3, DType::f32, 7},
    {DType::f64, "float64", 8, true, "F64", 4, DType::f64, 8},
    {DType::i64, "int64", 8, false, "I64", 5, DType::i64, 4},
    {DType::b8, "bool", 1, false, "BOOL", 0, DType::b8, -1},
    {DType::bf16, "bfloat16", 2, true, "BF16", 2, DType::f32, 9},
    {DType::f16, "float16", 2, true, "F16", 1, DType::f32, 6},
};
inline constexpr size_t kNumDTypes = sizeof(kDTypes) / sizeof(kDTypes[0]);

constexpr const DTypeInfo& info(DType t) { return kDTypes[size_t(t)]; }
constexpr size_t element_size(DType t) { return info(t).size; }
constexpr bool is_floating(DType t) { return info(t).is_floating; }
/// float32 for the 16-bit types, the type itself otherwise.
constexpr DType accumulate_dtype(DType t) { return info(t).accumulate; }

/// "float32", "float64", "int64", "bool", "bfloat16", "float16".
std::string_view name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

/// The C++ element type of each dtype, in the table's order: what the dispatchers iterate over.
template <typename... T>
struct TypeList {};
using AllTypes = TypeList<float, double, int64_t, bool, BFloat16, Float16>;

/// The DType of a C++ element type: dtype_of<float>() == DType::f32.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, bool>) return DType::b8;
  if constexpr (std::is_same_v<T, BFloat16>) return DType::bf16;
  if constexpr (std::is_same_v<T, Float16>) return DType::f16;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int64_t> || std::is_same_v<T, bool> ||
                    std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>,
                "dtype_of: not an element type of Tandem");
}

// The table is in enum order, and the type list agrees with it.
static_assert([] {
  for (size_t i = 0; i < kNumDTypes; ++i)
    if (size_t(kDTypes[i].dtype) != i) return false;
  return true;
}());
static_assert(dtype_of<BFloat16>() == kBFloat16 && element_size(kFloat16) == sizeof(Float16));

}  // namespace tandem
