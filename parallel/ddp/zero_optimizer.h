// parallel/ddp/zero_optimizer.h — an optimizer that updates only this rank's shard of the model
// (ZeRO stages 1 and 2; see zero_shards.h), then all-gathers the parameters:
//   parallel::DistributedDataParallel ddp(net, {.zero_stage = 2});
//   auto opt = parallel::zero_optimizer<optim::AdamW>(
//       ddp, optim::adamw_groups(net.named_parameters(), {.lr = 6e-4, .weight_decay = 0.1}));
//   optim::CosineWithWarmup schedule(*opt, ...);   // LR schedules see the same groups
//   loss.backward();               // each rank receives the average of its shard's gradients
//   parallel::clip_grad_norm_(*ddp.placements(), 1.0);  // the whole model's norm (the pieces')
//   opt->step();                   // this rank's shard, then every shard to every rank
// Any optimizer built from parameters or from parameter groups works, as long as its update is
// element-wise (SGD, Adam, AdamW): it is built over this rank's pieces of the parameters, so its
// state (momentum, Adam's moments) exists for those alone. A GradScaler works with it too, given
// its `all_reduce` option (each rank sees only its shard's gradients, and all must skip alike).
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/zero_shards.h>
#include <memory>
#include <utility>
#include <vector>

namespace tandem::parallel {

class ZeroOptimizer : public optim::Optimizer {
 public:
  /// `inner` must have been built over the pieces of `groups` (the module's parameters, one list
  /// per parameter group): zero_optimizer<> does that.
  ZeroOptimizer(std::shared_ptr<ZeroShards> shards, std::unique_ptr<optim::Optimizer> inner,
                const std::vector<std::vector<Tensor>>& groups);

  /// Updates this rank's pieces, then all-gathers every bucket's parameters.
  void step() override;
  /// Clears the pieces' gradients and any whole-parameter gradient left by a no_sync() backward.
  void zero_grad() override;

  size_t num_groups() const override { return inner_->num_groups(); }
  double lr(size_t group) const override { return inner_->lr(group); }
  void set_lr(size_t group, double lr) override { inner_->set_lr(group, lr); }
  /// This rank's pieces: 1-D views of the parameters' storage (what GradScaler unscales).
  std::vector<Tensor> parameters() const override { return inner_->parameters(); }
  /// Gathers the state one optimizer over the whole model would have (the keys and param_groups
  /// of the plain optimizer over the same groups: what a DDP checkpoint holds), so that a
  /// checkpoint does not depend on how many ranks wrote it. Collective: every rank calls it; every
  /// rank keeps it, for state_dict(). (PyTorch's ZeroRedundancyOptimizer has the same pair.)
  const optim::OptimizerState& consolidate_state_dict();
  /// The state consolidate_state_dict() gathered; ValueError if it was not called since the last
  /// step (the state would be stale), so saving on rank 0 alone cannot silently miss the others.
  optim::OptimizerState state_dict() const override;
  /// Loads a whole-model state dict (consolidated, or a plain optimizer's over the same groups)
  /// saved by any number of ranks: this rank keeps its pieces' slices. Not collective.
  void load_state_dict(const optim::OptimizerState& state) override;
  /// The param_groups JSON the plain optimizer over module_parameters() would have (its indices):
  /// what a consolidated state's groups say, without gathering anything.
  std::string param_groups_json() const;
  /// This rank's shard of the state, as the inner optimizer sees it (indices count pieces).
  optim::OptimizerState local_state_dict() const { return inner_->state_dict(); }
  optim::Optimizer& inner() { return *inner_; }
  /// The module's parameters in the groups' order: what the indices of state_dict()'s keys
  /// name (parameters() are this rank's pieces instead).
  const std::vector<Tensor>& module_parameters() const { return full_; }
  ZeroShards& shards() { return *shards_; }

 private:
  std::shared_ptr<ZeroShards> shards_;
  std::unique_ptr<optim::Optimizer> inner_;
  std::vector<Tensor> full_;         // the module's parameters, in group order
  std::vector<size_t> group_sizes_;  // how many of them each group has
  std::vector<size_t> param_index_;  // full_[j] -> its index in shards_->parameters()
  std::vector<int> inner_index_;     // full_[j] -> its piece's index in inner_, or -1
  int64_t steps_ = 0;
  int64_t consolidated_at_ = -1;  // steps_ when consolidated_ was gathered
  optim::OptimizerState consolidated_;
};

/// Opt over this rank's pieces of `params`: zero_optimizer<optim::SGD>(ddp, params, {.lr = 0.1}).
template <typename Opt, typename Options>
std::unique_ptr<ZeroOptimizer> zero_optimizer(DistributedDataParallelBase& ddp,
                                              const std::vector<Tensor>& params, Options options) {
  std::shared_ptr<ZeroShards> shards = ddp.zero_shards();
  auto inner = std::make_unique<Opt>(shards->pieces_of(params), options);
  return std::make_unique<ZeroOptimizer>(std::move(shards), std::move(inner),
                                         std::vector<std::vector<Tensor>>{params});
}

/// Opt over this rank's pieces of each group, every group kept (an empty one included, so that
/// group k means the same on every rank): zero_optimizer<optim::AdamW>(ddp, groups).
template <typename Opt>
std::unique_ptr<ZeroOptimizer> zero_optimizer(DistributedDataParallelBase& ddp,
                                              std::vector<typename Opt::Group> groups) {
  std::shared_ptr<ZeroShards> shards = ddp.zero_shards();
  std::vector<std::vector<Tensor>> full;
  for (auto& g : groups) {
    full.push_back(g.params);
    g.params = shards->pieces_of(g.params);
  }
  auto inner = std::make_unique<Opt>(std::move(groups));
  return std::make_unique<ZeroOptimizer>(std::move(shards), std::move(inner), full);
}

}  // namespace tandem::parallel
