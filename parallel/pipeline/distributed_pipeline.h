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
// Each rank runs its list of the schedule's actions (schedule.h: GPipe, 1F1B, interleaved, ZB-H1,
// ZB-V, DualPipeV, or an order of one's own, checked before the first step: schedule_check.h), one
// action at a time on the calling thread. A rank holds one stage, or several (interleaved: stages
// r, r+p, …; the V schedules: r and 2p−1−r), each a run of consecutive modules of the model.
// Forward i of a stage takes the stage before's activation for micro-batch i (received, or left
// by that stage when it is on this rank), runs the stage on it, and hands the output on; backward
// takes the output's gradient and hands the input's back. Messages carry their stage,
// micro-batch, dtype and shape in a small header, so a rank needs to know nothing about its
// neighbours' shapes and takes them in whatever order its schedule asks (one that arrives early
// waits in a mailbox). Activations and gradients travel on two communicators of their own
// (new_group over the same ranks), so neither direction waits behind the other; sends never
// wait (they are waited for at the end of the step), receives do.
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
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <tandem/parallel/placement.h>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tandem::parallel {

struct DistributedPipelineOptions {
  int64_t chunks = 1;  // micro-batches per batch (M)
  PipelineSchedule schedule = PipelineSchedule::GPipe;
  /// Interleaved's stages per rank (v ≥ 2); 0: the schedule's own (2 for the interleaved and V
  /// schedules, 1 for the others).
  int64_t virtual_stages = 0;
  /// A schedule of one's own, instead of `schedule`: its stage_ranks cut the model, its
  /// micro_batches must be `chunks`; sends and receives are added where it has none.
  std::optional<PipelineOrder> order = std::nullopt;
  /// Refuse an order that holds more micro-batches' activations on a stage's rank (0: any).
  int64_t max_in_flight = 0;
  /// Modules per stage, as split()'s balance (one entry per stage, not per rank); empty:
  /// balanced by parameter count.
  std::vector<int64_t> balance = {};
  /// The table (placement.h) that learns which tensors this rank trains: the stage's, along
  /// `mesh_dim` as pipeline stages, a tied copy another stage counts marked so. The entries of
  /// the modules other stages hold go. Null: a table of its own.
  std::shared_ptr<PlacementTable> placements = nullptr;
  std::string mesh_dim = "pp";
  /// Whether a training step's result has the last stage's outputs (torch's return_outputs):
  /// kept, each micro-batch's output stays until the step ends; false frees it with its
  /// backward, which saves a loop that reads only the loss m outputs' memory on the last stage.
  bool return_outputs = true;
};

struct DistributedPipelineResult {
  Tensor loss;  // the batch's mean loss (detached, unscaled), a float64 scalar, on every rank
  /// The last stage's outputs for the whole batch (detached) on the last stage's rank; undefined
  /// on the others, and after a training step with return_outputs = false.
  Tensor output;
  double seconds = 0;       // the step's wall time on this rank
  double busy_seconds = 0;  // the part spent computing: the rest waited for neighbours
  /// The most memory this rank's device held above the step's start, between actions
  /// (activations kept for backward and W, messages waiting): beside simulate()'s peak_memory.
  int64_t peak_activation_bytes = 0;
  /// This rank's actions as they ran (seconds on trace::now_us's clock, shared by the processes
  /// of one host): to set beside simulate(order()) (schedule_sim.h).
  std::vector<TimedAction> timeline;
};

class DistributedPipeline {
 public:
  using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

  /// `model`: the whole model, built the same way on every rank of `group`; this rank keeps the
  /// modules of stage group->rank() (the model's own objects, under the model's names), of
  /// group->size() stages. Collective: every rank of the group constructs its pipeline at once
  /// (it makes the message and tied-weight groups). ValueError for chunks < 1, a bad balance,
  /// fewer modules than stages, or an order the check refuses (schedule_check.h), naming it.
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

  /// Every module this rank holds (all its stages'), under the model's names: for its
  /// parameters, the optimizer, moves and state dicts. Its forward is not the pipeline's.
  nn::Sequential& stage() { return stage_; }
  /// Stage s's modules (a stage this rank holds).
  nn::Sequential& stage_modules(int64_t s);
  /// Where they lie in stage(): its items [first, end).
  std::pair<size_t, size_t> stage_items(int64_t s);
  /// The stages this rank holds, in model order.
  std::vector<int64_t> held_stages() const { return order_.stages_of(stage_index()); }
  /// Runs each stage's forward through `forward(x, stage)` from now on: a wrapper of the stage's
  /// modules that must see every micro-batch, such as fully_shard's
  /// (parallel/fsdp/fully_shard.h), which gathers a unit's shards in its own forward and
  /// reduce-scatters the micro-batches' gradients into them; `before_backward(stage, last)` is
  /// told before each backward whether it is that stage's last of the step (fully_shard's
  /// set_is_last_backward; fully_sharded_stages.h wires fully_shard so). Null: the stage's
  /// modules themselves.
  void run_through(std::function<Tensor(const Tensor&, int64_t stage)> forward,
                   std::function<void(int64_t stage, bool last)> before_backward = nullptr) {
    forward_ = std::move(forward);
    before_backward_ = std::move(before_backward);
  }
  /// The same for a rank that holds one stage (its wrapper: stage()'s).
  void run_through(std::function<Tensor(const Tensor&)> forward,
                   std::function<void(bool last)> before_backward = nullptr);
  /// This rank's position in the pipeline's group.
  int stage_index() const { return group_->rank(); }
  /// Ranks in the pipeline (p); the model has order().stages() stages.
  int stages() const { return group_->size(); }
  /// Whether this rank holds the first stage (it reads the input) or the last (the target, the
  /// loss and the output).
  bool is_first() const { return order_.stage_ranks.front() == stage_index(); }
  bool is_last() const { return last_rank() == stage_index(); }
  int last_rank() const { return order_.stage_ranks.back(); }
  /// The schedule every rank runs, with its sends and receives (checked).
  const PipelineOrder& order() const { return order_; }
  /// Every rank's timeline of a step (its DistributedPipelineResult::timeline), on every rank,
  /// in rank order: collective over the group, for a picture or measured_costs().
  std::vector<std::vector<TimedAction>> gather_timelines(const std::vector<TimedAction>& mine);
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

  nn::Sequential stage_;                      // every module this rank holds
  std::map<int64_t, nn::Sequential> stages_;  // per held stage, the same modules
  PipelineOrder order_;
  std::shared_ptr<Communicator> group_, activations_, gradients_;
  DistributedPipelineOptions options_;
  std::vector<Tied> tied_;
  std::function<Tensor(const Tensor&, int64_t)> forward_;  // run_through's; null: the stage
  std::function<void(int64_t, bool)> before_backward_;
};

}  // namespace tandem::parallel
