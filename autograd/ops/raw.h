// autograd/ops/raw.h — non-recording tensor math for backward functions and op internals. Each
// call allocates its output and runs one kernel; nothing here touches the graph, which is why
// backward is "written in kernels" and there is no double backward.
#pragma once

#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>

namespace tandem::raw {

/// out = op(a, b) with broadcasting; a and b must share device and dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name);
/// out = op(a, scalar), the scalar in a's dtype.
Tensor binary(BinaryOp op, const Tensor& a, double b, const char* name);
/// y = op(x).
Tensor unary(UnaryOp op, const Tensor& x);
/// Sums a broadcast gradient back to `shape` (the shape of the input it flows to).
Tensor sum_to(const Tensor& grad, const Shape& shape);
/// Reduces `x` over `dims` (all dims when empty); keepdim keeps them as size 1.
Tensor reduce(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim);
/// Broadcasts a reduced gradient back over the reduced dims, as a contiguous tensor of `shape`.
Tensor expand_reduced(const Tensor& dy, const Shape& shape, const Shape& dims, bool keepdim);
/// Sorted, wrapped, de-duplicated dims (all dims when `dims` is empty).
Shape normalize_dims(const Shape& dims, int64_t ndim, const char* op);

}  // namespace tandem::raw
