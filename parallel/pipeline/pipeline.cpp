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
#include <tandem/parallel/pipeline/schedule_check.h>
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

}  // namespace

std::vector<Device> pipeline_devices(PipelineSchedule schedule, const std::vector<Device>& devices,
                                     int64_t virtual_stages) {
  std::vector<Device> out;
  for (int r : stage_ranks(schedule, int64_t(devices.size()), virtual_stages))
    out.push_back(devices[size_t(r)]);
  return out;
}

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
  std::vector<Tensor> outputs, losses;             // per micro-batch, from the last stage
  std::vector<int64_t> peak;                       // per rank
  std::vector<int64_t> busy_us;                    // per rank
  std::vector<std::vector<TimedAction>> timeline;  // per rank
  std::mutex error_mutex;
  std::exception_ptr error;  // the first stage failure
};

Pipeline::Pipeline(std::vector<Stage> stages, PipelineOptions options)
    : stages_(std::move(stages)), options_(options) {
  TD_CHECK_VALUE(!stages_.empty(), "Pipeline: no stages");
  TD_CHECK_VALUE(options_.chunks >= 1, "Pipeline: chunks = ", options_.chunks,
                 "; a batch is cut into at least one micro-batch");
  const int64_t S = int64_t(stages_.size());
  if (options_.order) {
    TD_CHECK_VALUE(options_.order->stages() == S, "Pipeline: the order given has ",
                   options_.order->stages(), " stages but there are ", S);
  } else {
    const int64_t v = stages_per_rank(options_.schedule, options_.virtual_stages);
    TD_CHECK_VALUE(S % v == 0, "Pipeline: ", S, " stages for ", to_string(options_.schedule),
                   ", which holds ", v, " per rank; split the model over pipeline_devices()");
  }
  const int64_t ranks = options_.order
                            ? options_.order->world()
                            : S / stages_per_rank(options_.schedule, options_.virtual_stages);
  order_ = pipeline_order(options_.schedule, ranks, options_.chunks, options_.virtual_stages,
                          defers_weight_grads(options_), options_.order,
                          {.max_in_flight = options_.max_in_flight});
  for (int r = 0; r < order_.world(); ++r) {
    const std::vector<int64_t> mine = order_.stages_of(r);
    const Device dev = stages_[size_t(mine.front())].device;
    for (int64_t s : mine)
      TD_CHECK_VALUE(stages_[size_t(s)].device == dev, "Pipeline: stages ", mine.front(), " and ",
                     s, " run on rank ", r, " but were split onto ", dev, " and ",
                     stages_[size_t(s)].device, "; split the model over pipeline_devices()");
    keys_.push_back({dev, r});  // two ranks on one device get a thread each
  }
  workers_ = std::make_unique<DeviceWorkers>("pp");
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
  r.peak.assign(keys_.size(), 0);
  r.busy_us.assign(keys_.size(), 0);
  r.timeline.resize(keys_.size());

  // A tied weight's copies' gradients before this step, so that accumulating steps sum once.
  const TiedGradients tied_before = r.training ? tied_gradients_before(stages_) : TiedGradients{};
  const int64_t start = trace::now_us();
  // Every stage on its thread at once, under the caller's thread-local state, each with its share
  // of the intra-op threads.
  workers_->run(keys_, [&](size_t k) {
    try {
      run_rank(k, r);
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
  if (!r.training || options_.return_outputs) result.output = cat(r.outputs);
  if (r.training) {
    sum_tied_gradients(stages_, tied_before);  // a weight two stages use: each copy, the sum
    result.loss = r.losses[0];
    for (size_t i = 1; i < r.losses.size(); ++i) result.loss = result.loss + r.losses[i];
  }
  result.peak_activation_bytes = std::move(r.peak);
  result.seconds = seconds;
  for (int64_t us : r.busy_us) result.busy_seconds.push_back(double(us) * 1e-6);
  result.timeline = std::move(r.timeline);
  return result;
}

namespace {

// The messages between ranks of one process: through the Exchange, keyed by the stage they are
// for, which a failed rank aborts (every waiting rank wakes).
class ExchangeTransport : public StageTransport {
 public:
  explicit ExchangeTransport(Exchange& exchange) : exchange_(exchange) {}
  Tensor take_activation(int64_t s, int64_t i) override {
    return exchange_.take(Exchange::Activation, s, i);
  }
  void put_activation(int64_t s, int64_t i, const Tensor& y) override {
    exchange_.put(Exchange::Activation, s + 1, i, y);
  }
  Tensor take_gradient(int64_t s, int64_t i, const Tensor&) override {
    return exchange_.take(Exchange::Gradient, s, i);
  }
  void put_gradient(int64_t s, int64_t i, const Tensor& g) override {
    exchange_.put(Exchange::Gradient, s - 1, i, g);
  }
  bool aborted() override { return exchange_.aborted(); }

 private:
  Exchange& exchange_;
};

}  // namespace

void Pipeline::run_rank(size_t rank, Run& r) {
  const int64_t m = int64_t(r.sizes.size()), S = int64_t(stages_.size());
  const Device dev = keys_[rank].device;
  RankStep step{.training = r.training,
                .device = dev,
                .where = str("pipeline rank ", rank, " on ", dev),
                .stage_count = S};
  // The stage objects outlive the step, whose backward is where a checkpoint recomputes.
  for (int64_t s : order_.stages_of(int(rank))) {
    Stage& stage = stages_[size_t(s)];
    step.forward[s] = [&r, &stage, m, this](const Tensor& x, int64_t i) {
      const bool checkpointed =
          r.training && (options_.checkpoint == PipelineCheckpoint::Always ||
                         (options_.checkpoint == PipelineCheckpoint::ExceptLast && i + 1 < m));
      return checkpointed ? nn::activation_checkpoint(
                                [&stage](const Tensor& v) { return stage.modules(v); }, x)
                          : stage.modules(x);
    };
  }
  if (step.forward.count(0)) step.inputs = r.inputs;
  const bool last = step.forward.count(S - 1) != 0;
  if (last && r.training) {
    step.targets = r.targets, step.sizes = r.sizes, step.batch = r.batch;
    step.loss = *r.loss_fn, step.loss_scale = r.loss_scale;
    step.keep_outputs = options_.return_outputs;
  }
  const PipelineOrder evaluation =
      r.training ? PipelineOrder{} : forward_order(order_.stage_ranks, m);
  const std::vector<PipelineAction>& actions =
      r.training ? order_.ranks[rank] : evaluation.ranks[rank];
  ExchangeTransport transport(r.exchange);
  StageResult done = parallel::run_rank(actions, step, transport);
  if (last) {
    r.outputs = std::move(done.outputs);
    if (r.training) r.losses = std::move(done.losses);
  }
  r.peak[rank] = done.peak_bytes;
  r.busy_us[rank] = int64_t(done.busy_seconds * 1e6);
  r.timeline[rank] = std::move(done.timeline);
}

}  // namespace tandem::parallel
