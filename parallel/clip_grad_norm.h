// parallel/clip_grad_norm.h — gradient clipping when each rank holds part of the gradients (ZeRO's
// pieces, fully_shard's shards): clip_grad_norm_ on one device, with the sum of squares completed
// by one all-reduce, so every rank scales by the same factor.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <vector>

namespace tandem::parallel {

/// Scales the gradients of `parameters` (this rank's part of a model whose parts do not overlap)
/// so that the whole gradient's L2 norm is at most max_norm; returns the norm before clipping.
/// Collective: every rank of `group` calls it.
double clip_grad_norm_across(const std::vector<Tensor>& parameters, Communicator& group,
                             double max_norm);

}  // namespace tandem::parallel
