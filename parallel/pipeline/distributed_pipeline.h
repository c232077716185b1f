// parallel/pipeline/distributed_pipeline.h — a pipeline whose stages are processes (or thread
// ranks): rank k of the group runs stage k, and the activations and gradients between stages go
// over the group's send and recv. This is the pipeline that composes with tensor and data
// parallelism, as Megatron-LM's does: in a (dp, pp, tp) mesh each rank's "pp" group is the ranks
// that hold the same tensor-parallel slice of every stage, so the slices pass straight from one
// stage's rank to the next's (the in-process Pipeline, pipeline.h, keeps every stage in one
// process instead, on devices of its own).
//
//   nn::Sequential gpt = nn::gpt(config);                 // every rank builds the whole model
//   parallel::DistributedPipeline pipe(gpt, mesh.group("pp"), {.chunks = 4});
//   parallel::move_to(pipe.stage(), device, *pipe.placements());  // its records follow
//   optim::AdamW opt(pipe.stage().named_parameters());
//   auto r = pipe.step(x, y, loss);                        // r.loss on every rank
//   parallel::clip_grad_norm_(*pipe.placements(), 1.0);    // the tied weight counted once
//   opt.step();
//
// Each stage follows the same schedules as the in-process pipeline (schedule.h: GPipe or 1F1B),
// one action at a time on the calling thread. Forward i receives the stage before's activation for
// micro-batch i (a small header first, with its dtype and shape, so a stage needs to know nothing
// about its neighbours' shapes), runs the stage on it, and sends the output on; backward i
// receives the output's gradient and sends the input's back. Activations and gradients travel on
// two communicators of their own (new_group over the same ranks): on each, every rank posts its
// messages in micro-batch order, the order its neighbours read them, so neither direction waits
// behind the other.
//
// What it computes: as the in-process pipeline, the mean loss over the whole batch and its
// gradients. A parameter that two stages use (GPT's token embedding, read again by lm_head) is a
// copy on each of their ranks; after backward the copies' gradients are summed over those ranks
// (Megatron's embedding group), so they step alike, and the placement table counts it on its first
// stage only, for the gradient norm.
#pragma once

#include <tandem/nn/container.h>
#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <tandem/parallel/placement.h>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel {

struct DistributedPipelineOptions {
  int64_t chunks = 1;  // micro-batches per batch (M)
  PipelineSchedule schedule = PipelineSchedule::GPipe;
  /// Modules per stage, as split()'s balance; empty: balanced by parameter count.
  std::vector<int64_t> balance = {};
  /// The table (placement.h) that learns which tensors this rank trains: the stage's, along
  /// `mesh_dim` as pipeline stages, a tied copy another stage counts marked so. The entries of
  /// the modules other stages hold go. Null: a table of its own.
  std::shared_ptr<PlacementTable> placements = nullptr;
  std::string mesh_dim = "pp";
};

struct DistributedPipelineResult {
  Tensor loss;  // the batch's mean loss (detached, unscaled), a float64 scalar, on every rank
  /// The last stage's outputs for the whole batch (detached) on the last stage's rank; undefined
  /// on the others.
  Tensor output;
  double seconds = 0;       // the step's wall time on this rank
  double busy_seconds = 0;  // the part spent computing: the rest waited for neighbours
};

class DistributedPipeline {
 public:
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  /// `model`: the whole model, built the same way on every rank of `group`; this rank keeps the
  /// modules of stage group->rank() (the model's own objects, under the model's names), of
  /// group->size() stages. Collective: every rank of the group constructs its pipeline at once
  /// (it makes the message and tied-weight groups). ValueError for chunks < 1 or a bad balance.
  DistributedPipeline(nn::Sequential& model, std::shared_ptr<Communicator> group,
                      DistributedPipelineOptions options = {});

  /// One training step over the batch (every rank calls it): stage 0 reads `input`, the last
  /// stage `target` (others may pass undefined tensors). The loss function is applied to each
  /// micro-batch's output and must return its mean; gradients accumulate into the stage's
  /// parameters (zero them first), from the loss times `loss_scale`. Errors name the stage, the
  /// micro-batch and the direction. The neighbours of a stage that fails stop at once under
  /// spawn_threads (the failure reaches every sub-group) and `tandem launch` (which stops the
  /// other workers when one exits); otherwise at the group's timeout, naming what they awaited.
  DistributedPipelineResult step(const Tensor& input, const Tensor& target, const LossFn& loss,
                                 double loss_scale = 1);
  /// The model's output for `input` without a graph (evaluation): on the last stage's rank,
  /// undefined on the others.
  Tensor evaluate(const Tensor& input);

  nn::Sequential& stage() { return stage_; }
  /// Runs the stage's forward through `forward` from now on: a wrapper of stage() that must see
  /// every micro-batch, such as fully_shard's (parallel/fsdp/fully_shard.h), which gathers a
  /// unit's shards in its own forward and reduce-scatters the micro-batches' gradients into
  /// them; `before_backward(last)` is told before each backward whether it is the step's last
  /// (fully_shard's set_is_last_backward). Null: the stage's modules themselves.
  void run_through(std::function<Tensor(const Tensor&)> forward,
                   std::function<void(bool last)> before_backward = nullptr) {
    forward_ = std::move(forward);
    before_backward_ = std::move(before_backward);
  }
  int stage_index() const { return group_->rank(); }
  int stages() const { return group_->size(); }
  bool is_first() const { return stage_index() == 0; }
  bool is_last() const { return stage_index() + 1 == stages(); }
  const std::shared_ptr<Communicator>& group() const { return group_; }

  /// What this rank trains and how it lies in the whole model (the options' table).
  const std::shared_ptr<PlacementTable>& placements() const { return options_.placements; }
  /// The tied copies on this stage whose first stage is another: that stage counts them.
  std::vector<Tensor> counted_elsewhere();
  /// The stage's parameters that another stage holds as well (in the model's order).
  struct Tied {
    std::string name;                     // on this stage
    bool counted_here;                    // its first stage is this one
    std::shared_ptr<Communicator> group;  // the stages that hold it (its rank 0: the first)
  };
  const std::vector<Tied>& tied() const { return tied_; }
  /// Where the stage runs: its first parameter's device (the CPU if it has none).
  Device device();

 private:
  DistributedPipelineResult run(const Tensor& input, const Tensor* target, const LossFn* loss,
                                double loss_scale);
  void sum_tied_gradients(const std::map<std::string, Tensor>& before);

  nn::Sequential stage_;
  std::shared_ptr<Communicator> group_, activations_, gradients_;
  DistributedPipelineOptions options_;
  std::vector<Tied> tied_;
  std::function<Tensor(const Tensor&)> forward_;  // run_through's; null: stage_ itself
  std::function<void(bool)> before_backward_;
};

}  // namespace tandem::parallel
