// parallel/pipeline/pipeline.cpp — cutting the batch, each stage's loop over its actions, and
// stopping everything when one stage fails.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <tandem/core/trace.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/parallel/pipeline/exchange.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/pipeline/stage_runner.h>
#include <algorithm>
#include <exception>
#include <mutex>

namespace tandem::parallel {
namespace {

bool defers_weight_grads(const PipelineOptions& o) {
  if (o.weight_grads == PipelineWeightGrads::Auto) return o.schedule == PipelineSchedule::GPipe;
  return o.weight_grads == PipelineWeightGrads::Deferred;
}

// Stage k's thread: its device, and k (two stages on one device get a thread each).
std::vector<WorkerKey> keys_of(const std::vector<Stage>& stages) {
  std::vector<WorkerKey> keys;
  for (size_t k = 0; k < stages.size(); ++k) keys.push_back({stages[k].device, int(k)});
  return keys;
}

}  // namespace

// One step's shared state: what the caller hands the stages and what they hand back.
struct Pipeline::Run {
  bool training;
  std::vector<int64_t> sizes;     // micro-batch sizes
  int64_t batch;                  // their sum
  std::vector<Tensor> inputs;     // micro-batch i of the input, for stage 0
  std::vector<Tensor> targets;    // micro-batch i of the target, for the last stage
  const PipelineLossFn* loss_fn;  // null when evaluating
  double loss_scale;              // backward starts from loss × loss_scale
  Exchange exchange;
  std::vector<Tensor> outputs, losses;  // per micro-batch, from the last stage
  std::vector<int64_t> peak;            // per stage
  std::vector<int64_t> busy_us;         // per stage
  std::mutex error_mutex;
  std::exception_ptr error;  // the first stage failure
};

Pipeline::Pipeline(std::vector<Stage> stages, PipelineOptions options)
    : stages_(std::move(stages)), options_(options) {
  TD_CHECK_VALUE(!stages_.empty(), "Pipeline: no stages");
  TD_CHECK_VALUE(options_.chunks >= 1, "Pipeline: chunks = ", options_.chunks,
                 "; a batch is cut into at least one micro-batch");
  workers_ = std::make_unique<DeviceWorkers>("pp");
  keys_ = keys_of(stages_);
}

PipelineResult Pipeline::step(const Tensor& input, const Tensor& target, const PipelineLossFn& loss,
                              double loss_scale) {
  TD_CHECK_VALUE(GradMode::is_enabled(),
                 "Pipeline::step: gradients are off (NoGradGuard); use evaluate() to run the "
                 "model without training it");
  TD_CHECK_VALUE(!input.requires_grad(),
                 "Pipeline::step: the input requires grad, but a pipeline's input is data: "
                 "gradients stop at stage 0");
  TD_CHECK_SHAPE(target.dim() >= 1 && target.size(0) == input.size(0),
                 "Pipeline::step: the input's batch has ", input.size(0),
                 " samples but the target's shape is ", target.shape());
  return run(input, &target, &loss, loss_scale);
}

Tensor Pipeline::evaluate(const Tensor& input) {
  NoGradGuard no_grad;
  return run(input, nullptr, nullptr, 1).output;
}

PipelineResult Pipeline::run(const Tensor& input, const Tensor* target, const PipelineLossFn* loss,
                             double loss_scale) {
  TD_CHECK_SHAPE(input.dim() >= 1, "Pipeline: the input must have a batch dimension, not shape ",
                 input.shape());
  const int64_t n = input.size(0), m = options_.chunks;
  TD_CHECK_VALUE(n >= m, "Pipeline: ", m, " chunks but the batch has only ", n,
                 " samples; every micro-batch needs at least one");
  Run r;
  r.training = target != nullptr;
  r.sizes = micro_batch_sizes(n, m);
  r.batch = n;
  r.inputs = tandem::split(input, r.sizes);
  if (target) r.targets = tandem::split(*target, r.sizes);
  r.loss_fn = loss;
  r.loss_scale = loss_scale;
  r.outputs.resize(size_t(m));
  r.losses.resize(size_t(m));
  r.peak.assign(stages_.size(), 0);
  r.busy_us.assign(stages_.size(), 0);

  // A tied weight's copies' gradients before this step, so that accumulating steps sum once.
  const TiedGradients tied_before = r.training ? tied_gradients_before(stages_) : TiedGradients{};
  const int64_t start = trace::now_us();
  // Every stage on its thread at once, under the caller's thread-local state, each with its share
  // of the intra-op threads.
  workers_->run(keys_, [&](size_t k) {
    try {
      run_stage(k, r);
    } catch (const Exchange::Aborted&) {
      // Another stage failed and says so.
    } catch (...) {
      std::lock_guard lk(r.error_mutex);
      if (!r.error) r.error = std::current_exception();
      r.exchange.abort();
    }
  });
  if (r.error) std::rethrow_exception(r.error);
  const double seconds = double(trace::now_us() - start) * 1e-6;

  NoGradGuard no_grad;
  PipelineResult result;
  result.output = cat(r.outputs);
  if (r.training) {
    sum_tied_gradients(stages_, tied_before);  // a weight two stages use: each copy, the sum
    result.loss = r.losses[0];
    for (size_t i = 1; i < r.losses.size(); ++i) result.loss = result.loss + r.losses[i];
  }
  result.peak_activation_bytes = std::move(r.peak);
  result.seconds = seconds;
  for (int64_t us : r.busy_us) result.busy_seconds.push_back(double(us) * 1e-6);
  return result;
}

namespace {

// The messages between stages of one process: through the Exchange, which a failed stage
// aborts (every waiting stage wakes).
class ExchangeTransport : public StageTransport {
 public:
  ExchangeTransport(Exchange& exchange, int64_t stage) : exchange_(exchange), k_(stage) {}
  Tensor take_activation(int64_t i) override { return exchange_.take(Exchange::Activation, k_, i); }
  void put_activation(int64_t i, const Tensor& y) override {
    exchange_.put(Exchange::Activation, k_ + 1, i, y);
  }
  Tensor take_gradient(int64_t i, const Tensor&) override {
    return exchange_.take(Exchange::Gradient, k_, i);
  }
  void put_gradient(int64_t i, const Tensor& g) override {
    exchange_.put(Exchange::Gradient, k_ - 1, i, g);
  }
  bool aborted() override { return exchange_.aborted(); }

 private:
  Exchange& exchange_;
  int64_t k_;
};

}  // namespace

void Pipeline::run_stage(size_t k, Run& r) {
  Stage& stage = stages_[k];
  const int64_t m = int64_t(r.sizes.size());
  StageStep step{.first = k == 0,
                 .last = k + 1 == stages_.size(),
                 .training = r.training,
                 .device = stage.device,
                 .where = str("pipeline stage ", k, " on ", stage.device)};
  step.defer_weight_grads = r.training && defers_weight_grads(options_);
  // The stage object outlives the step, whose backward is where a checkpoint recomputes.
  step.forward = [&](const Tensor& x, int64_t i) {
    const bool checkpointed =
        r.training && (options_.checkpoint == PipelineCheckpoint::Always ||
                       (options_.checkpoint == PipelineCheckpoint::ExceptLast && i + 1 < m));
    return checkpointed ? nn::activation_checkpoint(
                              [&stage](const Tensor& v) { return stage.modules(v); }, x)
                        : stage.modules(x);
  };
  if (step.first) step.inputs = r.inputs;
  if (step.last && r.training) {
    step.targets = r.targets, step.sizes = r.sizes, step.batch = r.batch;
    step.loss = *r.loss_fn, step.loss_scale = r.loss_scale;
  }
  std::vector<PipelineAction> actions;
  if (r.training) {
    actions = stage_actions(options_.schedule, int64_t(k), int64_t(stages_.size()), m,
                            step.defer_weight_grads);
  } else {
    for (int64_t i = 0; i < m; ++i) actions.push_back({PipelineAction::Forward, i});
  }
  ExchangeTransport transport(r.exchange, int64_t(k));
  StageResult done = parallel::run_stage(actions, step, transport);
  if (step.last) {
    r.outputs = std::move(done.outputs);
    if (r.training) r.losses = std::move(done.losses);
  }
  r.peak[k] = done.peak_bytes;
  r.busy_us[k] = int64_t(done.busy_seconds * 1e6);
}

}  // namespace tandem::parallel
