// parallel/cp/positional_random.h — one device's random numbers at this rank's positions. Random
// ops draw counter offset + i for element i of their tensor (core/generator.h), so the numbers
// one device's rand() of [B, T, ...] gives the positions a context-parallel rank holds are known
// without drawing the others: for each row b and each chunk of the rank's, a contiguous run of
// counters. A dropout over this rank's positions that draws them drops what one device drops:
//
//   rand of [B = 2, T = 8, C] on one device: counters, by row and position (zig-zag, cp = 2)
//   row 0   | 0 1 | 2 3 | 4 5 | 6 7 |   × C each     rank 0 holds chunks 0 and 3, rank 1 1 and 2
//   row 1   | 8 9 |10 11|12 13|14 15|                rank 0 draws runs [0, 2C), [6C, 8C), [8C,
//            rank 0 rank 1 rank 1 rank 0              10C), [14C, 16C) of the offset
//
// Every rank reserves the whole tensor's counters, as one device would, so the generators of the
// group's ranks stay where one device's is.
#pragma once

#include <tandem/parallel/cp/sequence_split.h>

namespace tandem::parallel::cp {

/// The uniform numbers of rand() of the whole [B, T, ...] at this rank's positions: `shape` is
/// [B, T/cp, ...] (dim 1 the rank's positions, its chunks side by side), drawn from the current
/// generator of options.device, which advances by the whole tensor's count.
Tensor positional_uniforms(const Shape& shape, const TensorOptions& options, int64_t rank,
                           int64_t cp, SequenceSplit split);

}  // namespace tandem::parallel::cp
