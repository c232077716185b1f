// core/float16.h — the two 16-bit floating types, BFloat16 and Float16, as 2 bytes of bits with
// conversions to and from float that round to nearest, ties to even (as PyTorch, CUDA and the
// hardware instructions do). Kernels compute in float and store 16 bits: these types are storage,
// not arithmetic. Both are bit-for-bit the layout of Eigen::bfloat16 / Eigen::half and CUDA's
// __nv_bfloat16 / __half, so a buffer of one is a buffer of the other (std::bit_cast per value).
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits — float32's range, 3 significant digits.
//   float16:  1 sign, 5 exponent, 10 mantissa bits — up to 65504, subnormals from 2^-24.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem {
namespace detail {

// The same 4 bytes as another type (std::bit_cast, which device code lacks; memcpy compiles to a
// register move on both sides).
template <typename To, typename From>
TANDEM_HOST_DEVICE inline To same_bits(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  std::memcpy(&y, &x, sizeof y);
  return y;
}
TANDEM_HOST_DEVICE inline uint32_t float_bits(float f) { return same_bits<uint32_t>(f); }
TANDEM_HOST_DEVICE inline float bits_float(uint32_t u) { return same_bits<float>(u); }

// bfloat16 is float32's upper half: add just under half of the dropped part, plus the kept
// part's lowest bit (ties go to even), and keep the upper 16 bits. A NaN stays a (quiet) NaN
// instead of rounding into inf.
// Written as a select rather than an early return, so a loop of conversions vectorises.
TANDEM_HOST_DEVICE inline uint16_t bf16_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, nan = (u >> 16) | 0x0040u;
  return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

TANDEM_HOST_DEVICE inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// float16 from float32 with the floating-point unit doing the rounding (M. Dukhan's FP16 method):
// scaling by 2^112 then 2^-110 makes values too large for float16 overflow to inf and leaves the
// rest with float16's precision, and adding a power of two chosen from the exponent rounds the
// mantissa to 10 bits (or to a subnormal's fewer) to nearest even in float arithmetic.
TANDEM_HOST_DEVICE inline uint16_t f16_from_float(float f) {
  const float to_inf = 5.192296858534828e+33f;   // 2^112
  const float to_zero = 7.703719777548943e-34f;  // 2^-110
  const float magnitude = f < 0 ? -f : f;
  float base = (magnitude * to_inf) * to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;  // the sign shifted out
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;  // subnormal float16: round at 2^-24
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return uint16_t((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));  // NaN: quiet NaN
}

// float16 to float32, exactly: normal values by moving exponent and mantissa into place and
// rescaling; subnormals by building 0.5 + m·2^-24 in float and subtracting 0.5.
TANDEM_HOST_DEVICE inline float f16_to_float(uint16_t h) {
  const uint32_t w = uint32_t(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float exp_scale = 1.925929944387236e-34f;  // 2^-112
  const float normalized = bits_float((two_w >> 4) + (0xe0u << 23)) * exp_scale;
  const float denormalized = bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? float_bits(denormalized) : float_bits(normalized));
  return bits_float(result);
}

}  // namespace detail

/// A 16-bit float of format F (F::from_float, F::to_float): converts to float implicitly, and
/// from numbers and the other 16-bit type explicitly, rounding to nearest even through float.
template <typename F>
struct Float16Bits {
  uint16_t bits = 0;
  Float16Bits() = default;
  template <typename T>
  requires std::is_arithmetic_v<T> || std::is_convertible_v<T, float>
      TANDEM_HOST_DEVICE explicit Float16Bits(T value) : bits(F::from_float(float(value))) {}
  TANDEM_HOST_DEVICE operator float() const { return F::to_float(bits); }
  TANDEM_HOST_DEVICE static Float16Bits from_bits(uint16_t b) {
    Float16Bits x;
    x.bits = b;
    return x;
  }
};

struct BFloat16Format {
  TANDEM_HOST_DEVICE static uint16_t from_float(float f) { return detail::bf16_from_float(f); }
  TANDEM_HOST_DEVICE static float to_float(uint16_t b) { return detail::bf16_to_float(b); }
};
struct Float16Format {
  TANDEM_HOST_DEVICE static uint16_t from_float(float f) { return detail::f16_from_float(f); }
  TANDEM_HOST_DEVICE static float to_float(uint16_t b) { return detail::f16_to_float(b); }
};

using BFloat16 = Float16Bits<BFloat16Format>;  // bfloat16
using Float16 = Float16Bits<Float16Format>;    // IEEE float16 (half)

static_assert(sizeof(BFloat16) == 2 && std::is_trivially_copyable_v<BFloat16>);
static_assert(sizeof(Float16) == 2 && std::is_trivially_copyable_v<Float16>);

}  // namespace tandem
