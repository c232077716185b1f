// core/shape.h — shapes and strides: lists of int64 printed as [64, 784]. Helpers for the layout
// rules every op shares: element counts, contiguous strides, dimension wrapping, broadcasting.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <vector>

namespace tandem {

/// A list of sizes (or strides). A distinct type, so `std::cout << shape` prints [2, 3].
struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}  // NOLINT
};
using Strides = Shape;

std::ostream& operator<<(std::ostream& os, const Shape& s);

/// Product of the sizes (1 for a scalar shape []).
int64_t numel(const Shape& shape);

/// Row-major (C order) strides for `shape`, in elements.
Strides contiguous_strides(const Shape& shape);

/// Turns a possibly negative dim into [0, ndim); IndexError naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

/// NumPy broadcasting of two shapes; ShapeError naming `op` and both shapes when they do not fit.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace tandem
