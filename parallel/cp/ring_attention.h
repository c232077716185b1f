// parallel/cp/ring_attention.h — attention over a sequence split across the ranks of a
// context-parallel group (Liu et al.'s ring attention). Each rank holds its positions' q, k and
// v (sequence_split.h); the k, v blocks travel round the ring, each rank attending its queries to
// the block it holds while the next one is on its way, and the partial results merge exactly by
// their log-sum-exp (FlashAttention's online softmax): the output is one device's attention at
// this rank's positions. Backward goes round again: each rank recomputes its blocks from the
// saved output and log-sum-exp, keeps dq, and sends dk, dv along with k, v, so that each block's
// gradient arrives home after cp steps.
//
//   cp = 3, contiguous split: the k, v block each rank holds at each step
//   step      rank 0   rank 1   rank 2          causal: a query chunk sees key chunks before it
//   0         kv0      kv1      kv2             whole, its own chunk under the causal mask, and
//   1         kv2      kv0      kv1             none after it (not computed)
//   2         kv1      kv2      kv0             send to rank r+1, receive from r−1, each step
//
// Under a causal mask the zig-zag split gives every rank the same number of blocks to compute.
// Tested on threads, shared memory, Gloo and MPI, and on cuda:0.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/cp/sequence_split.h>
#include <optional>

namespace tandem::parallel::cp {

/// How the heads attend (ring and Ulysses attention alike).
struct ContextAttentionOptions {
  bool causal = true;
  SequenceSplit split = SequenceSplit::ZigZag;
  std::optional<double> scale;  // default 1/√D
  // Dropout on the probabilities, from the current generator of q's device, which every rank
  // advances as one device's attention over the whole sequence would: each probability drops
  // where one device's does (the generators of the group's ranks must agree, as one device's).
  double dropout_p = 0;
};

/// q, k, v: this rank's positions, [..., T/cp, D] (the split's chunks side by side; v may have
/// its own head dim), the same shape on every rank of `group`. Returns this rank's positions of
/// scaled_dot_product_attention over the whole sequence, differentiable (q, k and v get their
/// gradients). Collective over `group`, in forward and in backward: every rank calls it in the
/// same order, and the group must outlive the backward pass, which sends and receives through it.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, Communicator& group,
                      const ContextAttentionOptions& options = {});

}  // namespace tandem::parallel::cp
