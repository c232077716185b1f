// parallel/placed_elements.h — the placement record made executable: which elements of the whole
// tensor one rank's tensor holds, as flat indices into the whole. What a sharded checkpoint writes
// beside each rank's tensors, and reads to give any other layout its elements (PyTorch's DCP
// plans the same with chunk offsets; a record of Shard blocks and ZeRO pieces needs indices).
//
//   whole [4, 2], elements 0..7          tp: Shard(dim 0), 2 ranks, at 1      dp: Piece[1, 3)
//   ┌───┬───┐                            ┌───┬───┐                           ┌───┬───┐
//   │ 0 │ 1 │                            │ 4 │ 5 │  ──▶ flattened 4 5 6 7 ──▶ │ 5 │ 6 │
//   │ 2 │ 3 │  ──▶ rows 2..3 ──────────▶ │ 6 │ 7 │                           └───┴───┘
//   │ 4 │ 5 │                            └───┴───┘
//   │ 6 │ 7 │                            this rank's elements of the whole: [5, 6]
//   └───┴───┘
//
// A Shard's padding rows have no element of the whole: their index is −1.
#pragma once

#include <tandem/parallel/placement.h>
#include <vector>

namespace tandem::parallel {

/// One placement as one rank applied it: how, over how many ranks, at which coordinate.
struct AppliedPlacement {
  Placement how;
  int64_t ranks = 1;
  int64_t at = 0;
};

/// Entry `e`'s placements as this rank applied them (the ranks and coordinate from the table's
/// group of each dimension); Replicate and Partial, which cut nothing, are left out.
std::vector<AppliedPlacement> applied_placements(const PlacedTensor& e,
                                                 const PlacementTable& table);

/// For each element of the tensor the chain leaves (row-major), its flat index in `whole`, or −1
/// for padding. ValueError naming `what` when the chain does not fit the shape.
std::vector<int64_t> whole_elements(const Shape& whole, const std::vector<AppliedPlacement>& chain,
                                    std::string_view what);

/// whole_elements for a tensor of `numel` elements: a chain's trailing padding, which a rank's
/// tensor may leave out (fully_shard's last chunk), dropped. ValueError naming `what` when the
/// tensor and the chain disagree otherwise.
std::vector<int64_t> held_elements(const Shape& whole, const std::vector<AppliedPlacement>& chain,
                                   int64_t numel, std::string_view what);

/// Element i of `part` goes to element at[i] of `whole` (none where at[i] < 0). Both contiguous,
/// of one dtype, on the CPU.
void put_elements(const Tensor& part, const std::vector<int64_t>& at, Tensor& whole);
/// Element i of `part` comes from element at[i] of `whole` (left as it is where at[i] < 0).
void take_elements(const Tensor& whole, const std::vector<int64_t>& at, Tensor& part);

}  // namespace tandem::parallel
