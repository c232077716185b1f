// core/kernels/cpu/eigen.h — Eigen views of tensor memory for the CPU kernels (never included by a
// public header: Eigen is an implementation detail and slow to compile). Tensors are row-major, so
// matrices are mapped RowMajor; Eigen's default column-major would silently transpose them.
#pragma once

#include <tandem/core/tensor.h>
#include <Eigen/Core>

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
