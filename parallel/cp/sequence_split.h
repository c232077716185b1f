// parallel/cp/sequence_split.h — which positions of a sequence each rank of a context-parallel
// group holds. Under a causal mask the later positions attend to more keys, so the plain split
// gives the last rank the most work; the zig-zag split (Megatron-Core's and Brandon et al.'s load
// balancing) cuts the sequence into 2·cp chunks and gives rank r chunks r and 2·cp−1−r, so every
// rank holds one early and one late chunk and does the same work:
//
//   T = 8 positions, cp = 2        chunks (zig-zag: 4 of 2 positions)
//   contiguous   rank 0: 0 1 2 3         rank 1: 4 5 6 7
//   zig-zag      rank 0: 0 1 | 6 7       rank 1: 2 3 | 4 5
//
// A rank's part is its chunks side by side, in that order.
#pragma once

#include <tandem/core/tensor.h>
#include <vector>

namespace tandem::parallel::cp {

enum class SequenceSplit { Contiguous, ZigZag };

/// The sequence's chunks: cp contiguous, 2·cp zig-zag.
int64_t chunk_count(int64_t cp, SequenceSplit split);
/// The chunks rank `rank` of `cp` holds, in the order its part lists them.
std::vector<int64_t> chunks_of(int64_t rank, int64_t cp, SequenceSplit split);
/// This rank's part of `whole` along `dim` (its length must split into chunk_count chunks; the
/// error names it). A new contiguous tensor.
Tensor shard_sequence(const Tensor& whole, int64_t dim, int64_t rank, int64_t cp,
                      SequenceSplit split);
/// The whole sequence from every rank's part (in rank order) along `dim`: shard_sequence undone.
Tensor unshard_sequence(const std::vector<Tensor>& parts, int64_t dim, SequenceSplit split);
/// The positions rank `rank` holds of a sequence of `length`, in its part's order (the position
/// ids its embedding reads).
std::vector<int64_t> positions_of(int64_t rank, int64_t cp, int64_t length, SequenceSplit split);

}  // namespace tandem::parallel::cp
