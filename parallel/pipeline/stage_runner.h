// parallel/pipeline/stage_runner.h — one stage's part of a pipeline step, written once for both
// pipelines (Pipeline: the stages on devices of one process, messages through an Exchange;
// DistributedPipeline: a stage per rank, messages as sends and receives), as torch's
// pipelining runs a stage's chunk apart from its point-to-point messages. The runner takes the
// schedule's actions in order:
//
//   forward  i   micro-batch i's input (the first stage's own, else the previous stage's
//                activation), detached, a leaf when training (its gradient goes back); the
//                stage's modules; the last stage's loss weighted n_i / n (× the loss scale),
//                the others' output sent on
//   backward i   from the loss, or from the next stage's gradient of the output; the input's
//                gradient sent back; the micro-batch's activations freed
//   W            the Linears' weight gradients deferred by every backward (GPipe's W action)
//
// and names the stage and micro-batch in any error. How the tensors travel is the transport's.
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <functional>
#include <string>
#include <vector>

namespace tandem::parallel {

/// Where a stage's messages come from and go to, by micro-batch.
class StageTransport {
 public:
  virtual ~StageTransport() = default;
  /// Micro-batch i's activation from the stage before.
  virtual Tensor take_activation(int64_t i) = 0;
  virtual void put_activation(int64_t i, const Tensor& y) = 0;
  /// Micro-batch i's gradient of this stage's output from the stage after (`output`: what this
  /// stage sent, for its shape and dtype).
  virtual Tensor take_gradient(int64_t i, const Tensor& output) = 0;
  virtual void put_gradient(int64_t i, const Tensor& gradient) = 0;
  /// Whether another stage failed: the runner stops before its next action.
  virtual bool aborted() { return false; }
};

/// One stage's step: what it runs, and what the first and last stages hold.
struct StageStep {
  bool first = false, last = false, training = false;
  Device device;
  std::string where;  // "pipeline stage 1 of 2 on cpu:1", for errors
  // The stage's modules on micro-batch i (i: for a per-micro-batch choice, such as checkpointing).
  std::function<Tensor(const Tensor& x, int64_t i)> forward;
  std::vector<Tensor> inputs;  // the first stage: each micro-batch's input
  // The last stage, training: each micro-batch's target and size, their sum, the loss function,
  // and the scale backward starts from (the gradient scaler's).
  std::vector<Tensor> targets;
  std::vector<int64_t> sizes;
  int64_t batch = 0;
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss;
  double loss_scale = 1;
  bool defer_weight_grads = false;  // backward leaves the Linears' weight gradients to W
  // Called before each backward, with whether it is the stage's last of the step (null: none):
  // for a wrapper that must know when the micro-batches' gradients are all in (fully_shard's
  // set_is_last_backward).
  std::function<void(bool last)> before_backward;
};

struct StageResult {
  std::vector<Tensor> outputs;  // the last stage: each micro-batch's output, detached
  std::vector<Tensor> losses;   // the last stage, training: each loss × n_i / n, unscaled
  double busy_seconds = 0;      // inside actions, not waiting for messages
  int64_t peak_bytes = 0;       // the most the device held after an action, above its start
};

/// Runs `actions` (schedule.h) for `step`, messages through `transport`. An error is rethrown
/// with the stage and the micro-batch (and direction) it happened in.
StageResult run_stage(const std::vector<PipelineAction>& actions, const StageStep& step,
                      StageTransport& transport);

}  // namespace tandem::parallel
