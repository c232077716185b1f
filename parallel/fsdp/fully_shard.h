// parallel/fsdp/fully_shard.h — fully sharded data parallelism (ZeRO stage 3; PyTorch's FSDP2,
// torch.distributed.fsdp.fully_shard): each rank keeps 1/W of every parameter, of its gradient
// and of the optimizer state, and the whole parameters of a unit exist only while it computes.
//
//   nn::Sequential model = nn::gpt(config);                  // the same init on every rank
//   parallel::FullyShardedModule fsdp(std::move(model), {.group = group});
//   optim::AdamW opt(optim::adamw_groups(fsdp.named_parameters(), {...}));  // the shards
//   loss = nn::gpt_loss(fsdp(x), y);  loss.backward();  opt.step();
//
// Units are the Sequential's items that own parameters (a GPT's embedding, each block, ln_f):
// FSDP2 applied to each block and to the root. A tensor several items use (the GPT's tied
// embedding) forms one more unit, the root's, gathered before the first item and kept until
// backward ends. Per step, for a unit:
//   forward    all-gather its shards (the next unit's all-gather already in flight: prefetch),
//              run it, and free the whole parameters again (reshard_after_forward): what its ops
//              saved of them is kept as a note (saved-tensor hooks), not as the tensors;
//   backward   when the gradient of its output is complete (a hook), all-gather again (and start
//              the previous unit's); the ops' notes read the gathered tensors; once every
//              parameter's gradient is in (the unshard op's backward), one mean reduce-scatter
//              hands each rank its shards' gradients, and the whole tensors are freed.
// With reshard_after_forward false the forward's whole parameters stay until backward (no second
// all-gather: the bytes of DDP, 2× its parameter memory per unit in flight).
//
// Where things happen: sharded_unit.cpp (layout and collectives), fully_shard.cpp (the order:
// forward, hooks, end of backward), fsdp_state_dict.cpp (whole state dicts).
#pragma once

#include <tandem/nn/container.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/fsdp/sharded_unit.h>
#include <tandem/parallel/placement.h>
#include <memory>
#include <optional>

namespace tandem::parallel {

struct FullyShardOptions {
  std::shared_ptr<Communicator> group;  // null: the default process group
  /// Free each unit's whole parameters after its forward and gather them again for its
  /// backward (ZeRO-3's memory, 1.5× DDP's bytes); false keeps them from forward to backward.
  bool reshard_after_forward = true;
  /// All-gather and compute in this dtype (bfloat16 for mixed precision; the shards, gradients'
  /// write-back and optimizer stay in the parameters' dtype). Inputs that are floating point
  /// are cast to it, as FSDP2's MixedPrecisionPolicy does.
  std::optional<DType> param_dtype;
  /// Reduce-scatter gradients in this dtype (default: the parameters').
  std::optional<DType> reduce_dtype;
  /// The table (placement.h) each shard is recorded in, as a Shard along `mesh_dim` after what
  /// the table already says of its parameter (tensor parallelism's cut, say: FSDP2's
  /// _init_sharding_spec_tp). Null: a table of its own. Read it back with placements().
  std::shared_ptr<PlacementTable> placements;
  std::string mesh_dim = "dp";
};

class FullyShardedModule : public nn::Module {
 public:
  /// Takes the model (every rank must build the same one; rank 0's values are broadcast) and
  /// keeps only this rank's shards of its parameters: the whole tensors are freed once nothing
  /// else holds them. Buffers (batch-norm statistics) stay whole on every rank.
  explicit FullyShardedModule(nn::Sequential model, FullyShardOptions options = {});
  /// The same in place: `model`'s own fields then hold the shards (a trainer that keeps the
  /// model for train()/eval() and names sees them).
  explicit FullyShardedModule(std::shared_ptr<nn::Sequential> model,
                              FullyShardOptions options = {});
  FullyShardedModule(const FullyShardedModule&) = delete;
  FullyShardedModule& operator=(const FullyShardedModule&) = delete;
  ~FullyShardedModule() override;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }
  /// The model's items [first, end) alone, as forward runs them: a pipeline rank that holds
  /// several stages (interleaved, V schedules) runs each stage's items as its own forward.
  Tensor forward_items(const Tensor& x, size_t first, size_t end);
  /// Transparent: parameters() are the shards, under the model's names; state_dict() holds this
  /// rank's shards (full_state_dict() the whole tensors).
  void visit(nn::Visitor& v) override;
  std::string type_name() const override { return "FullyShardedModule"; }

  nn::Sequential& module() { return *model_; }
  /// Elements of the whole parameters (parameter_count() counts this rank's shards).
  int64_t whole_parameter_count() const;
  Communicator& group();
  const std::vector<std::shared_ptr<ShardedUnit>>& units() const;

  /// Turns the reduce-scatter off for the scope (gradient accumulation): each unit sums its
  /// whole gradients locally (one whole-size buffer per unit), and the first backward after it
  /// reduce-scatters the sum.
  class NoSync {
   public:
    explicit NoSync(FullyShardedModule& m);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    FullyShardedModule* m_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  /// Whether the next backward is the step's last (FSDP2's set_is_last_backward). A pipeline
  /// runs several micro-batches' forwards before their backwards (GPipe: all of them): after a
  /// backward that is not the last, a unit still waiting for another micro-batch's gradients
  /// keeps them (its reduce-scatter sums every micro-batch's), and the step's counts stay;
  /// after the last, every unit is reduced and the step ends. Default true: one backward a step.
  void set_is_last_backward(bool last);

  /// Where each shard lies in the whole model (the table of FullyShardOptions::placements): what
  /// parallel::clip_grad_norm_ reads.
  const std::shared_ptr<PlacementTable>& placements() const;

  /// PyTorch's whole-state methods, over parallel/whole_state.h with the group as the world
  /// (the table must span only this group: under TP, call parallel::full_state_dict with the
  /// run's world). Each is collective: every rank must call it.
  /// The whole parameters and buffers under the model's names, on the CPU (a tied tensor under
  /// both names); with `rank0_only` the other ranks get an empty dict (FSDP's
  /// FullStateDictConfig(rank0_only=True)).
  nn::StateDict full_state_dict(bool rank0_only = false);
  /// Loads a whole state dict (from any world size, or one device): each rank copies its rows
  /// into its shards. Missing, unexpected and misshapen entries are one DataError naming them.
  void load_full_state_dict(const nn::StateDict& state, std::string_view source = "");
  /// The state an optimizer over the whole model would have (one device's keys, param_groups
  /// and values), from `optimizer`, an optimizer over parameters().
  optim::OptimizerState full_optimizer_state_dict(const optim::Optimizer& optimizer,
                                                  bool rank0_only = false);
  /// Loads such a whole state (from any world size, or one device) into `optimizer`, an
  /// optimizer over parameters(): each rank keeps its rows.
  void load_full_optimizer_state_dict(optim::Optimizer& optimizer,
                                      const optim::OptimizerState& state);

  struct State;  // shared with the hooks (fully_shard.cpp)

 private:
  std::shared_ptr<nn::Sequential> model_;
  std::shared_ptr<State> state_;
};

/// FullyShardedModule(std::move(model), options), as PyTorch spells it.
inline std::unique_ptr<FullyShardedModule> fully_shard(nn::Sequential model,
                                                       FullyShardOptions options = {}) {
  return std::make_unique<FullyShardedModule>(std::move(model), std::move(options));
}

}  // namespace tandem::parallel
