// parallel/clip_grad_norm.h — the gradient norm of a model however it is cut, read from its
// placement table (placement.h): llm.c's one gpt2_calculate_grad_norm for every layout. Each
// element of the whole gradient is squared once on the rank that counts it, then one all-reduce
// of one number per dimension along which the ranks hold different parts:
//
//   along a dimension the table    a tensor placed there as    counts on
//   divides (tp, FSDP's dp, pp)    Shard or Piece              every rank (each its part)
//                                  Replicate or Partial        the rank at coordinate 0
//                                  (a pipeline's stages)       the rank that holds it
//   does not divide (DDP's dp)     Replicate                   every rank, and nothing is summed
//
// and a tied weight's copy (PlacedTensor::counted false) counts nowhere. So the norm is one
// device's, and every rank scales its gradients by the same factor:
//
//   auto table = std::make_shared<parallel::PlacementTable>();
//   auto model = parallel::tp::tensor_parallel_gpt(gpt, mesh.group("tp"), {.placements = table});
//   parallel::FullyShardedModule fsdp(model, {.group = mesh.group("dp"), .placements = table});
//   loss.backward();
//   parallel::clip_grad_norm_(*table, 1.0);        // as optim::clip_grad_norm_ on one device
#pragma once

#include <tandem/parallel/placement.h>

namespace tandem::parallel {

/// The L2 norm of the whole model's gradient (what one device's optim::clip_grad_norm_ returns),
/// with every gradient `table` lists scaled so that the norm is at most max_norm. Collective:
/// every rank of every dimension the table divides calls it.
double clip_grad_norm_(const PlacementTable& table, double max_norm);

/// The same norm, without scaling.
double grad_norm(const PlacementTable& table);

/// Sums over its dimension's group each gradient placed Partial (sequence parallelism's
/// replicated tensors, which saw only this rank's positions): one all-reduce per dimension, after
/// backward and before the norm and the step (Megatron's allreduce of sequence-parallel grads).
void reduce_partial_gradients(const PlacementTable& table);

}  // namespace tandem::parallel
