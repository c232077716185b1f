// parallel/tp/regions.h — the four communication ops at the edges of a tensor-parallel region
// (Megatron-LM's mappings.py). Inside a region each rank of the tensor-parallel group holds a
// slice of the activations along the last dimension; these ops enter and leave it, and each one's
// backward is the other's forward:
//
//   op                                forward                     backward
//   copy_to_tensor_parallel_region    identity                    all-reduce (sum)   "f"
//   reduce_from_tensor_parallel_region all-reduce (sum)           identity           "g"
//   scatter_to_tensor_parallel_region this rank's last-dim slice  all-gather (last dim)
//   gather_from_tensor_parallel_region all-gather (last dim)      this rank's slice
//
// With sequence parallelism the activations between the regions are split too, along the
// sequence (dim 1 of [B, T, ...]: rank r holds positions [r·T/t, (r+1)·T/t)), and two more ops
// take the all-reduces' place, moving the same bytes (Korthikanti et al. 2022):
//
//   gather_from_sequence_parallel_region     all-gather (dim 1)     reduce-scatter (dim 1)
//   reduce_scatter_to_sequence_parallel_region reduce-scatter (dim 1) all-gather (dim 1)
//   scatter_to_sequence_parallel_region      this rank's positions  all-gather (dim 1)
//
// (The last enters the split from a tensor every rank holds whole: the GPT's embedding, whose
// learned positions are added before it, parallel/tp/plan.h.)
//
// A column-parallel Linear starts with f (every rank reads the whole input, so the input's
// gradient is the sum of every rank's part); a row-parallel Linear ends with g (each rank's
// product is a partial sum of the output). Slices are in rank order, so the rank's slice of a
// dimension d is [rank·d/t, (rank+1)·d/t); d must divide by t (the error names the padding).
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <string>

namespace tandem::parallel::tp {

using Group = std::shared_ptr<Communicator>;

/// The mesh dimension the tensor-parallel layers record their cuts along (parallel/placement.h).
inline const std::string kDimension = "tp";

Tensor copy_to_tensor_parallel_region(const Tensor& x, const Group& group);
Tensor reduce_from_tensor_parallel_region(const Tensor& x, const Group& group);
Tensor scatter_to_tensor_parallel_region(const Tensor& x, const Group& group);
Tensor gather_from_tensor_parallel_region(const Tensor& x, const Group& group);
Tensor gather_from_sequence_parallel_region(const Tensor& x, const Group& group);
Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, const Group& group);
Tensor scatter_to_sequence_parallel_region(const Tensor& x, const Group& group);

/// An all-gather along the sequence in flight (for fused ops that compute while it travels):
/// finish() waits and returns every rank's positions side by side, [B, T, ...].
struct SequenceGather {
  Tensor all;  // [T, B, ...]: the sequence first, so the communicator's chunks are positions
  WorkPtr work;
  Tensor finish();
};
SequenceGather start_sequence_gather(const Tensor& x, Communicator& group, const char* op);
/// A reduce-scatter along the sequence in flight: finish() waits and returns this rank's
/// positions of the sum, [B, T/t, ...].
struct SequenceReduceScatter {
  Tensor mine;  // [T/t, B, ...]
  WorkPtr work;
  Tensor finish();
};
SequenceReduceScatter start_sequence_reduce_scatter(const Tensor& x, Communicator& group,
                                                    const char* op);

/// This rank's part of `whole` when its dimension `dim` is `blocks` blocks, each split `parts`
/// ways in rank order: rows [b·block + rank·part, +part) of every block b, side by side (a copy).
/// How a column layer of stride `blocks` takes its rows, and how a checkpoint's whole tensor is
/// cut back into one.
Tensor rank_slice(const Tensor& whole, int64_t dim, int64_t blocks, int rank, int parts);

/// A new parameter: a copy of `whole`'s slice [start, start + length) along `dim` (how every
/// tensor-parallel layer takes its part of one device's tensor).
Tensor sliced_parameter(const Tensor& whole, int64_t dim, int64_t start, int64_t length);

/// The size of rank `rank`'s slice of a dimension of `size` split `parts` ways; ValueError naming
/// `what` and the padding to add when it does not divide.
int64_t divide(int64_t size, int64_t parts, const std::string& what);

}  // namespace tandem::parallel::tp
