// parallel/cp/ulysses_attention.h — attention over a sequence split across a context-parallel
// group, by heads (DeepSpeed-Ulysses, Jacobs et al. 2023): an all-to-all turns this rank's
// positions of every head into every position of H/cp of the heads, each rank attends over the
// whole sequence for its heads, and a second all-to-all turns the output back. Each all-to-all
// moves (cp − 1)/cp of its tensors, in one step, where ring attention sends k and v cp − 1 times;
// but the heads must divide by cp, and each rank holds the whole sequence for its heads while it
// attends.
//
//   cp = 2, H = 4, zig-zag split (the sequence in chunks 0 1 2 3)
//                        rank 0                    rank 1
//   q, k, v              heads 0-3, chunks 0 3     heads 0-3, chunks 1 2
//   all-to-all   ──▶     heads 0-1, chunks 0-3     heads 2-3, chunks 0-3
//   attention            causal, over the whole sequence, one device's for these heads
//   all-to-all   ──▶     heads 0-3, chunks 0 3     heads 0-3, chunks 1 2      (the output)
#pragma once

#include <tandem/parallel/cp/ring_attention.h>

namespace tandem::parallel::cp {

/// q, k, v: this rank's positions, [..., H, T/cp, D] (the split's chunks side by side), the same
/// shape on every rank of `group`; H must divide by cp (the error names both). Returns this
/// rank's positions of scaled_dot_product_attention over the whole sequence, differentiable.
/// Collective over `group`, forward and backward (an all-to-all each way); the group must
/// outlive the backward pass.
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, Communicator& group,
                         const ContextAttentionOptions& options = {});

}  // namespace tandem::parallel::cp
