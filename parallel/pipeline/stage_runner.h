// parallel/pipeline/stage_runner.h — one rank's part of a pipeline step, written once for both
// pipelines (Pipeline: ranks are devices of one process, messages through an Exchange;
// DistributedPipeline: ranks of a group, messages as sends and receives), as torch's pipelining
// runs a stage's chunk apart from its point-to-point messages. The rank holds one stage or
// several (interleaved, V) and takes its actions (schedule.h) in order:
//
//   F s i       micro-batch i through stage s: its input (stage 0: the batch's, else the stage
//               before's activation, received or left here by that stage), detached, a leaf when
//               training; the last stage's loss weighted n_i / n (× the loss scale)
//   B s i       backward from the loss, or from the stage after's gradient of the output; the
//               input's gradient kept to send (or left for the stage before, when it is here);
//               the micro-batch's activations on the stage freed
//   I s i       the same, but the Linears' weight gradients deferred (deferred_weight_grads.h)
//   W s i       those weight gradients into .grad (W s *: every micro-batch's, one product)
//   SEND_F/SEND_B, RECV_F/RECV_B   the messages, through the transport
//
// and names the rank, the stage and the micro-batch in any error. Each action's start and end
// are kept: the measured timeline, beside the simulator's (schedule_sim.h).
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <tandem/parallel/pipeline/schedule_sim.h>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tandem::parallel {

/// Where a rank's messages come from and go to, by stage and micro-batch.
class StageTransport {
 public:
  virtual ~StageTransport() = default;
  /// Stage `stage`'s input for micro-batch i, from stage − 1's rank.
  virtual Tensor take_activation(int64_t stage, int64_t i) = 0;
  /// Stage `stage`'s output for micro-batch i, to stage + 1's rank.
  virtual void put_activation(int64_t stage, int64_t i, const Tensor& y) = 0;
  /// The gradient of stage `stage`'s output for micro-batch i, from stage + 1's rank (`output`:
  /// what the stage sent, for its shape and dtype).
  virtual Tensor take_gradient(int64_t stage, int64_t i, const Tensor& output) = 0;
  /// The gradient of stage `stage`'s input for micro-batch i, to stage − 1's rank.
  virtual void put_gradient(int64_t stage, int64_t i, const Tensor& gradient) = 0;
  /// Whether another rank failed: the runner stops before its next action.
  virtual bool aborted() { return false; }
};

/// One rank's step: the stages it runs, and what the first and last stages hold.
struct RankStep {
  bool training = false;
  Device device;
  std::string where;        // "pipeline rank 1 of 2 on cpu:1", for errors
  int64_t stage_count = 1;  // S, the model's stages
  // Stage s's modules on micro-batch i (i: for a per-micro-batch choice, such as checkpointing),
  // for each stage this rank holds.
  std::map<int64_t, std::function<Tensor(const Tensor& x, int64_t i)>> forward;
  std::vector<Tensor> inputs;  // stage 0, when held: each micro-batch's input
  // The last stage, when held and training: each micro-batch's target and size, their sum, the
  // loss function, and the scale backward starts from (the gradient scaler's).
  std::vector<Tensor> targets;
  std::vector<int64_t> sizes;
  int64_t batch = 0;
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss;
  double loss_scale = 1;
  bool keep_outputs = true;  // training: keep each output for StageResult::outputs
  // Called before each backward (B or I) of stage s, with whether it is that stage's last of
  // the step (null: none): for a wrapper that must know when the micro-batches' gradients are
  // all in (fully_shard's set_is_last_backward).
  std::function<void(int64_t stage, bool last)> before_backward;
};

struct StageResult {
  std::vector<Tensor> outputs;  // the last stage, when held: each micro-batch's output, detached
                                // (empty when training without keep_outputs)
  std::vector<Tensor> losses;   // the last stage, training: each loss × n_i / n, unscaled
  double busy_seconds = 0;      // inside compute actions, not waiting for messages
  int64_t peak_bytes = 0;       // the most the device held after an action, above its start
  std::vector<TimedAction> timeline;  // every action, in seconds on trace::now_us's clock
};

/// Runs `actions` (with their sends and receives: with_communication) for `step`, messages
/// through `transport`. An error is rethrown with the rank, stage and micro-batch it happened in.
StageResult run_rank(const std::vector<PipelineAction>& actions, const RankStep& step,
                     StageTransport& transport);

/// A forward-only order for evaluation: every stage's forwards, each rank taking (stage,
/// micro-batch) pairs by s + i (a wavefront: what a forward needs always comes first).
PipelineOrder forward_order(const std::vector<int>& stage_ranks, int64_t micro_batches);

}  // namespace tandem::parallel
