// parallel/ep/plan.h — expert parallelism applied to a model with MoE layers (nn/moe.h): each
// rank of the ep group keeps E/ep of every MoE's experts (Shard(0) of the stacked weights) and
// sends each token to the rank holding its expert (dispatch.h). Everything else is whole on
// every rank and sees this rank's rows of the batch, as under data parallelism.
//
//   mesh dp × ep = 2 × 2, E = 4     ep rank 0           ep rank 1
//   rows of the batch               its quarter         its quarter    (dp × ep ranks: 4 parts)
//   router, attention, embeddings   whole               whole          (reduced over dp × ep)
//   experts                         0, 1                2, 3           (reduced over dp)
//   capacity, balance loss          counted over the dp × ep rows: one device's decisions
//
// Gradients. Data parallelism runs over dp as for any model (DDP, ZeRO or fully_shard over the
// mesh's "dp"): the ranks that hold the same experts. Then ep::reduce_gradients reads the table:
//   a dense tensor (Replicate along ep): each ep rank's gradient is its rows' share -> averaged
//     over ep;
//   an expert (Shard(0) along ep): its gradient already sums, through the all_to_all_v's
//     backward, the shares of every rank of the ep group -> divided by ep (Megatron-LM's
//     expert-data-parallel scaling).
// The table stays a grid, dp × ep, so the norm, the clip and the whole state read it as any
// other layout's, and the data-parallel wrappers shard the experts' slices as they do TP's.
//
//   auto model = ep::expert_parallel(whole, mesh.group("ep"),
//                                    {.rows = mesh.flatten({"dp", "ep"}), .placements = table});
//   FullyShardedModule fsdp(model, {.group = mesh.group("dp"), .placements = table});
//   loss.backward();  ep::reduce_gradients(*table);  clip_grad_norm_(*table, 1.0);  opt.step();
#pragma once

#include <tandem/nn/container.h>
#include <tandem/parallel/placement.h>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel::ep {

/// The mesh dimension of the expert-parallel ranks.
inline const std::string kDimension = "ep";

struct ExpertParallelOptions {
  /// The ranks the batch's rows are split over, in the rows' order (dp × ep flattened): the
  /// routing group whose counts decide the capacity and the balance loss. Null: the ep group.
  std::shared_ptr<Communicator> rows;
  /// The table earlier wrappers recorded in; the plan records the experts' cuts along "ep".
  std::shared_ptr<PlacementTable> placements;
};

/// A copy of `model` (its own tensors; `model` is left as it was) whose every MoE holds this
/// rank's E/ep experts and dispatches to the others'. ValueError when the model has no MoE, or
/// when a layer's E does not divide by the group's size (the error names both).
nn::Sequential expert_parallel(const nn::Sequential& model,
                               const std::shared_ptr<Communicator>& group,
                               ExpertParallelOptions options = {});

/// Every MoE of `model` counts its choices over `rows` (the ranks the batch's rows are split
/// over, in the rows' order), so that its capacity and balance loss are one device's for the
/// whole batch. expert_parallel does it; data parallelism with the experts whole on every rank
/// (ep = 1) calls it itself, or each rank would drop by its own rows (as Megatron-LM does).
void share_routing(nn::Module& model, std::shared_ptr<Communicator> rows);

/// The experts' tensors of every MoE in `model`, in the model's order.
std::vector<Tensor> expert_parameters(nn::Module& model);

/// After backward and data parallelism's reduction over dp: the gradients of the tensors
/// Replicate along "ep" averaged over the table's ep group, those Shard along it divided by its
/// size (see above). Collective over ep; a table without "ep" is left as it is.
void reduce_gradients(const PlacementTable& table);

}  // namespace tandem::parallel::ep
