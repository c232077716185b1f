// core/kernels/cpu/eigen.h — Eigen views of tensor memory for the CPU kernels (never included by a
// public header: Eigen is an implementation detail and slow to compile). Tensors are row-major, so
// matrices are mapped RowMajor; Eigen's default column-major would silently transpose them.
#pragma once

#include <tandem/core/tensor.h>
#include <cmath>
#include <type_traits>

// GCC 12 warns "'__Y' may be used uninitialized" inside its own AVX-512 intrinsics
// (avx512fintrin.h's _mm256_undefined_pd, GCC bug 105593, fixed in GCC 13) when Eigen's products
// are inlined into our kernels. The warning is raised after inlining, at a location inside a
// system header but with our code on the inlining stack, so -isystem does not hide it. GCC
// consults these pragmas at every location on that stack, so scoping them to Eigen's headers
// silences it for Eigen's code alone; our own code keeps -Wmaybe-uninitialized (as an error under
// TANDEM_WERROR). Including <immintrin.h> first puts the intrinsics inside the same scope. In a
// unity batch another file may have included the intrinsics already, outside the scope; then
// GCC, inlining differently, says "is used uninitialized" (-Wuninitialized) at the same places,
// and only the Eigen locations on the stack are in scope to silence it: so both are ignored
// (seen on an AVX-512 host, where -march=native enables those intrinsics). Every CPU kernel
// reaches Eigen through this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>  // erf, lgamma, ... for the elementwise kernels
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace tandem::cpu {

template <typename T>
using Array1 = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrayMap = Eigen::Map<Array1<T>, Eigen::Unaligned>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Array1<T>, Eigen::Unaligned>;
template <typename T>
using MatrixRM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<MatrixRM<T>, Eigen::Unaligned>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const MatrixRM<T>, Eigen::Unaligned>;

// √x correctly rounded in every lane: `a.unaryExpr(ExactSqrt{})` for `a.sqrt()` (the sqrt op,
// Adam). Eigen's own
// sqrt under EIGEN_FAST_MATH (its default) takes an rsqrt estimate and a Newton step for float
// packets, and on AVX-512 for double packets too, while the scalar head and tail of a loop call
// std::sqrt: an element's result then depends on where its array starts, so a piece of a tensor
// (a ZeRO shard) would not step as the whole does, and float64 would differ from PyTorch's.
#if defined(__AVX512F__)
inline __m512 sqrt_packet(__m512 x) { return _mm512_sqrt_ps(x); }
inline __m512d sqrt_packet(__m512d x) { return _mm512_sqrt_pd(x); }
#endif
#if defined(__AVX__)
inline __m256 sqrt_packet(__m256 x) { return _mm256_sqrt_ps(x); }
inline __m256d sqrt_packet(__m256d x) { return _mm256_sqrt_pd(x); }
#endif
#if defined(__SSE2__)
inline __m128 sqrt_packet(__m128 x) { return _mm_sqrt_ps(x); }
inline __m128d sqrt_packet(__m128d x) { return _mm_sqrt_pd(x); }
#endif
struct ExactSqrt {
  template <typename T>
  T operator()(const T& x) const {
    return std::sqrt(x);
  }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    return sqrt_packet(x);
  }
};

// max and min that are NaN when either operand is, as torch.maximum and torch.amax are. Eigen's
// default (PropagateFast) is std::max's `a < b ? b : a`, which keeps a NaN in `a` but drops one in
// `b`, so a NaN survived or vanished by where it lay: `x.binaryExpr(y, NanMax<T>())`, and
// `nan_max(a, b)` for scalars.
template <typename T>
using NanMax = Eigen::internal::scalar_max_op<T, T, Eigen::PropagateNaN>;
template <typename T>
using NanMin = Eigen::internal::scalar_min_op<T, T, Eigen::PropagateNaN>;
template <typename T>
T nan_max(T a, T b) {
  return (a < b || b != b) ? b : a;
}
/// The largest element of `a`, NaN if it holds one (maxCoeff() alone may skip it).
template <typename A>
typename A::Scalar max_or_nan(const A& a) {
  if constexpr (std::is_floating_point_v<typename A::Scalar>)
    return a.template maxCoeff<Eigen::PropagateNaN>();
  else
    return a.maxCoeff();
}
template <typename A>
typename A::Scalar min_or_nan(const A& a) {
  if constexpr (std::is_floating_point_v<typename A::Scalar>)
    return a.template minCoeff<Eigen::PropagateNaN>();
  else
    return a.minCoeff();
}

/// All elements of a contiguous tensor as a 1-D Eigen array.
template <typename T>
ArrayMap<T> flat(Tensor& t) {
  return ArrayMap<T>(t.data<T>(), t.numel());
}
template <typename T>
ConstArrayMap<T> flat(const Tensor& t) {
  return ConstArrayMap<T>(t.data<T>(), t.numel());
}

/// A contiguous tensor viewed as a rows × cols row-major matrix.
template <typename T>
MatrixMap<T> matrix(Tensor& t, int64_t rows, int64_t cols) {
  return MatrixMap<T>(t.data<T>(), rows, cols);
}
template <typename T>
ConstMatrixMap<T> matrix(const Tensor& t, int64_t rows, int64_t cols) {
  return ConstMatrixMap<T>(t.data<T>(), rows, cols);
}

}  // namespace tandem::cpu

template <>
struct Eigen::internal::functor_traits<tandem::cpu::ExactSqrt> {
#if defined(__SSE2__)
  static constexpr bool kPackets = true;
#else
  static constexpr bool kPackets = false;
#endif
  enum { Cost = 20, PacketAccess = kPackets };
};
