// parallel/pipeline/pipeline.h — pipeline parallelism: the stages of a split model run side by
// side on micro-batches, so no device waits for the whole batch to pass the others.
//
//   auto stages = parallel::split(model, {Device("cpu:0"), Device("cpu:1")});
//   parallel::Pipeline pipe(std::move(stages), {.chunks = 8});
//   auto loss = [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); };
//   for (auto& [x, y] : batches) {
//     optimizer.zero_grad();
//     auto r = pipe.step(x, y, loss);  // r.loss: the batch's mean loss; r.output: its outputs
//     optimizer.step();
//   }
//
// How it works: the batch is cut into `chunks` micro-batches along dim 0 (sizes differ by at most
// one). The schedule (schedule.h) gives each rank — here a device — its list of actions, and
// each rank has its own worker thread (autograd/device_workers.h) that runs it. A forward takes
// its input from the stage before (for stage 0, the micro-batch), detached, and passes its output
// on; a backward takes the output's gradient from the stage after and passes the input's
// gradient back (exchange.h). Each stage's graph therefore ends at its own boundaries, and
// backward of one micro-batch on one stage runs while another stage computes something else.
// Schedules with several stages per rank (interleaved, zb-v, dualpipev) take the stages split()
// made over pipeline_devices(): a device appears once per stage it holds. With GPipe, each
// backward leaves the stage's Linear weight gradients for one W action over all micro-batches
// (PipelineWeightGrads; the backward's defer_weight_grads option,
// autograd/deferred_weight_grads.h): one large product per weight instead of M small ones on the
// critical path; the zero-bubble schedules place a W per micro-batch where the bubble was. (The
// weights stay put during a step and each meets every micro-batch: the CPU GEMM packs such a weight
// for oneDNN by itself, core/kernels/cpu/weight_cache.h.)
//
// What it computes: the loss function is applied to each micro-batch's output and must return
// the mean over that micro-batch (as cross_entropy and mse_loss do by default). The pipeline
// weights micro-batch i's loss by n_i / n before its backward, so the loss and the gradients
// accumulated into the parameters are those of the mean over the whole batch: the same as the
// model run on the batch at once, up to the order of floating-point sums. Batch norm is the
// exception (it sees micro-batches); dropout draws micro-batch by micro-batch from each stage
// device's generator, so a pipeline is reproducible from run to run when its stages are on
// distinct devices (stages sharing a device share a generator, drawn in a timing-dependent order).
#pragma once

#include <tandem/autograd/device_workers.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/pipeline/tied.h>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace tandem::parallel {

/// Which micro-batches keep only their stage inputs in forward and recompute in backward
/// (nn::activation_checkpoint), per stage: none, all but the last (whose backward follows its
/// forward at once, so checkpointing it saves nothing: torchgpipe's default), or all.
enum class PipelineCheckpoint { Never, ExceptLast, Always };

/// When each stage computes its Linear layers' weight gradients (autograd/deferred_weight_grads.h).
/// WithBackward: in each micro-batch's backward, as outside a pipeline. Deferred: in one W action
/// after the stage's last backward, over every micro-batch's rows at once: fewer and larger
/// products, off the critical path; the stage keeps each micro-batch's layer inputs and output
/// gradients until then (and W concatenates them), so its peak can pass the forward's. Auto:
/// Deferred for GPipe, which holds every micro-batch's activations at its peak anyway;
/// WithBackward for 1F1B, whose point is to free them early.
enum class PipelineWeightGrads { Auto, WithBackward, Deferred };

struct PipelineOptions {
  int64_t chunks = 1;  // micro-batches per batch (M)
  PipelineSchedule schedule = PipelineSchedule::GPipe;
  /// Interleaved's stages per rank (v ≥ 2); 0: the schedule's own (2 for the interleaved and V
  /// schedules, 1 for the others).
  int64_t virtual_stages = 0;
  /// A schedule of one's own, instead of `schedule`: one stage of split()'s per stage of the
  /// order, each on its rank's device; micro_batches must be `chunks`.
  std::optional<PipelineOrder> order = std::nullopt;
  /// Refuse an order that holds more micro-batches' activations on a rank (0: any).
  int64_t max_in_flight = 0;
  PipelineCheckpoint checkpoint = PipelineCheckpoint::Never;
  PipelineWeightGrads weight_grads = PipelineWeightGrads::Auto;
  /// Whether a training step's result has the last stage's outputs (torch's return_outputs):
  /// kept, each micro-batch's output stays until the step ends; false frees it with its
  /// backward, which saves a loop that reads only the loss m outputs' memory on the last stage.
  bool return_outputs = true;
};

/// loss(output_i, target_i) on the last stage's device: the mean over micro-batch i.
using PipelineLossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

struct PipelineResult {
  Tensor loss;    // the mean over the batch (detached, unscaled), on the last stage's device
  Tensor output;  // the last stage's outputs for the whole batch (detached), on its device
                  // (undefined after a training step with return_outputs = false)
  /// Per stage: the most memory its device held for the step beyond what it held when the step
  /// began, sampled between actions (activations kept for backward, messages in flight; the
  /// transient buffers inside one op are not included), from memory_stats().
  std::vector<int64_t> peak_activation_bytes;
  /// The step's wall time, and per rank the part spent computing (its forwards and backwards,
  /// not the waits for a neighbour): busy_seconds[r] / seconds is rank r's utilisation, at most
  /// M / (M + K − 1) for GPipe or 1F1B over stages of equal work — the rest is the bubble.
  double seconds = 0;
  std::vector<double> busy_seconds;
  /// Per rank, its actions as they ran (seconds on trace::now_us's clock): to set beside
  /// simulate(order()) (schedule_sim.h).
  std::vector<std::vector<TimedAction>> timeline;
};

/// The device of each stage for split() when `schedule` runs over `devices` (one per rank):
/// devices itself, or for the interleaved schedule (v stages per rank) devices v times over, for
/// the V schedules down the devices and back up.
std::vector<Device> pipeline_devices(PipelineSchedule schedule, const std::vector<Device>& devices,
                                     int64_t virtual_stages = 0);

class Pipeline {
 public:
  /// Stages as split() makes them, one per stage of the schedule (pipeline_devices() gives
  /// their devices). ValueError for no stages, chunks < 1, a stage count the schedule cannot
  /// use, two stages of one rank on different devices, or an order the check refuses
  /// (schedule_check.h), naming it.
  Pipeline(std::vector<Stage> stages, PipelineOptions options = {});

  /// One training step's forward and backward over every micro-batch, in the schedule's order;
  /// gradients accumulate into the parameters' .grad (zero them first, as usual; a weight two
  /// stages share has its copies' gradients summed, tied.h). Backward starts
  /// from the loss times `loss_scale` (a GradScaler's get_scale(): the gradients come scaled, the
  /// loss returned does not). The input is
  /// data: gradients stop at stage 0 (ValueError if it requires grad). ValueError when the batch
  /// has fewer samples than chunks or the target's batch size differs. An exception in any stage
  /// stops every stage and is re-thrown here, its type kept, naming the stage, its device, the
  /// micro-batch and whether it was forward or backward.
  PipelineResult step(const Tensor& input, const Tensor& target, const PipelineLossFn& loss,
                      double loss_scale = 1);

  /// The model's output for `input` without recording a graph (evaluation), micro-batched
  /// through the same workers, on the last stage's device.
  Tensor evaluate(const Tensor& input);

  std::vector<Stage>& stages() { return stages_; }
  const PipelineOptions& options() const { return options_; }
  /// The schedule's actions per rank, with the messages (ranks: the devices, in order of their
  /// first stage).
  const PipelineOrder& order() const { return order_; }

 private:
  struct Run;
  void run_rank(size_t r, Run& run);
  PipelineResult run(const Tensor& input, const Tensor* target, const PipelineLossFn* loss,
                     double loss_scale);

  std::vector<Stage> stages_;
  PipelineOptions options_;
  PipelineOrder order_;
  std::unique_ptr<DeviceWorkers> workers_;  // one thread per rank, the pipeline's own
  std::vector<WorkerKey> keys_;             // rank r's: its device and r
};

}  // namespace tandem::parallel
