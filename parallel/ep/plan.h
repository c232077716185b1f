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
// Gradients. A dense tensor's gradient on a rank is its rows' share of the mean: DDP over dp × ep
// together averages it (DeviceMesh::flatten({"dp", "ep"})), with the experts left out
// (DDPOptions::ignored = expert_parameters()). It records "dp" (DDPOptions::mesh_group), so
// that the table's dimensions stay a grid: dp × ep, the experts Shard(0) along ep. An expert's
// gradient already sums, through the all_to_all_v's backward, the shares of the ep group's
// rows; ExpertDataParallel sums it over dp, the ranks holding the same experts, and divides by
// dp · ep (Megatron-LM's expert data parallelism, scaled as its edp/dp factor).
//
//   DDP ddp(model, {.group = mesh.flatten({"dp", "ep"}), .mesh_group = mesh.group("dp"),
//                   .placements = table, .ignored = ep::expert_parameters(model)});
//   ep::ExpertDataParallel experts(model, mesh.group("dp"), mesh.size("ep"));
//   loss.backward();  experts.reduce_gradients();  clip_grad_norm_(*table, 1.0);  opt.step();
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

/// The experts' tensors of every MoE in `model` (what data parallelism over dp × ep must leave
/// to ExpertDataParallel), in the model's order.
std::vector<Tensor> expert_parameters(nn::Module& model);

/// The experts' data parallelism: their gradients summed over the ranks that hold the same
/// experts (`dp`; null when there is one data rank) and divided by dp · ep.
class ExpertDataParallel {
 public:
  /// Copies dp rank 0's experts to the others (as DDP does its parameters). Collective over dp.
  ExpertDataParallel(nn::Module& model, std::shared_ptr<Communicator> dp, int ep);
  /// After backward, before the clip and the step. Collective over dp.
  void reduce_gradients();
  const std::vector<Tensor>& parameters() const { return params_; }

 private:
  std::vector<Tensor> params_;
  std::shared_ptr<Communicator> dp_;
  int ep_;
};

}  // namespace tandem::parallel::ep
