// core/kernels/cpu/eigen.h — Eigen views of tensor memory for the CPU kernels (never included by a
// public header: Eigen is an implementation detail and slow to compile). Tensors are row-major, so
// matrices are mapped RowMajor; Eigen's default column-major would silently transpose them.
#pragma once

#include <tandem/core/tensor.h>

// GCC 12 warns "'__Y' may be used uninitialized" inside its own AVX-512 intrinsics
// (avx512fintrin.h's _mm256_undefined_pd, GCC bug 105593, fixed in GCC 13) when Eigen's products
// are inlined into our kernels. The warning is raised after inlining, at a location inside a
// system header but with our code on the inlining stack, so -isystem does not hide it. GCC
// consults these pragmas at every location on that stack, so scoping them to Eigen's headers
// silences it for Eigen's code alone; our own code keeps -Wmaybe-uninitialized (as an error under
// TANDEM_WERROR). Including <immintrin.h> first puts the intrinsics inside the same scope. Every
// CPU kernel reaches Eigen through this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
