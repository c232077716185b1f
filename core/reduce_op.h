// core/reduce_op.h — how values are combined, for both kinds of reduction Tandem has: a kernel
// reducing along a dimension (sum, mean, max, min, argmax of a tensor) and a collective reducing
// across devices or ranks (all_reduce, reduce_scatter: sum, mean, max, min). One enum for both,
// so that "mean" is one word whichever way it reduces (PyTorch says MEAN for one, AVG for the
// other).
#pragma once

#include <cstdint>

namespace tandem {

enum class ReduceOp : int8_t { Sum, Mean, Max, Min, ArgMax };

/// "sum", "mean", "max", "min", "argmax".
const char* name(ReduceOp op);

}  // namespace tandem
