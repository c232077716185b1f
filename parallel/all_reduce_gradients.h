// parallel/all_reduce_gradients.h — every gradient of a list reduced over a group in one
// all-reduce: flattened into one buffer, reduced, copied back. What DDP does bucket by bucket
// inside backward, for callers that reduce once after it: the replicated tensors' partial
// gradients under sequence parallelism (summed), a pipeline's data-parallel ranks (averaged).
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <vector>

namespace tandem::parallel {

/// Reduces the defined gradients of `parameters` over `group` with `op`, in place (one
/// all-reduce; parameters without a gradient are skipped). Collective: every rank calls it with
/// the same parameters' gradients defined.
void all_reduce_gradients(const std::vector<Tensor>& parameters, Communicator& group,
                          ReduceOp op = ReduceOp::Sum);

}  // namespace tandem::parallel
