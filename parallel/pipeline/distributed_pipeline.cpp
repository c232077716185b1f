// parallel/pipeline/distributed_pipeline.cpp — one rank's stage: its loop over the schedule's
// actions, the messages to and from its neighbours, and the tied weights' gradient sums.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/pipeline/stage_runner.h>
#include <tandem/parallel/pipeline/tensor_message.h>
#include <tandem/parallel/pipeline/tied.h>
#include <algorithm>
#include <map>
#include <set>

namespace tandem::parallel {

DistributedPipeline::DistributedPipeline(nn::Sequential& model, std::shared_ptr<Communicator> group,
                                         DistributedPipelineOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  TD_CHECK_VALUE(group_ != nullptr, "DistributedPipeline: no group");
  TD_CHECK_VALUE(options_.chunks >= 1, "DistributedPipeline: chunks = ", options_.chunks,
                 "; a batch is cut into at least one micro-batch");
  const int stages = group_->size(), k = group_->rank();
  const std::vector<int64_t> sizes = stage_sizes(model, stages, options_.balance);
  // Which stages use each parameter, by identity: every rank sees the whole model, so every rank
  // finds the same tied weights in the same order (new_group below must be called alike).
  std::map<const TensorImpl*, std::set<int>> users;
  int64_t begin = 0;
  for (int s = 0; s < stages; ++s) {
    nn::Sequential modules = model.slice(size_t(begin), size_t(begin + sizes[size_t(s)]));
    for (const Tensor& p : modules.parameters()) users[&p.impl()].insert(s);
    if (s == k) stage_ = std::move(modules);
    begin += sizes[size_t(s)];
  }
  std::vector<int> everyone;
  for (int r = 0; r < stages; ++r) everyone.push_back(r);
  activations_ = group_->new_group(everyone);
  gradients_ = group_->new_group(everyone);

  const nn::StateDict mine = stage_.named_parameters();
  std::map<std::set<int>, std::shared_ptr<Communicator>> groups;  // one per set of stages
  for (const Tensor& p : model.parameters()) {
    const std::set<int>& holders = users[&p.impl()];
    if (holders.size() < 2) continue;
    if (!groups.count(holders))
      groups[holders] = group_->new_group(std::vector<int>(holders.begin(), holders.end()));
    if (!holders.count(k)) continue;
    for (const auto& [name, t] : mine)
      if (t.is_same(p)) {
        tied_.push_back({name, *holders.begin() == k, groups[holders]});
        break;
      }
  }
  if (!options_.placements) options_.placements = std::make_shared<PlacementTable>();
  options_.placements->add_dimension(options_.mesh_dim, group_, Across::Stages);
  // Under one device's names: a tied copy is recorded under its first name (the embedding's,
  // not the head's), as a checkpoint of the whole model names it.
  nn::StateDict named;
  for (const auto& [name, p] : model.named_parameters())
    for (const auto& [n, t] : mine)
      if (t.is_same(p)) {
        named.emplace_back(name, t);
        break;
      }
  options_.placements->keep_only(named);
  for (const Tensor& copy : counted_elsewhere()) options_.placements->record(copy).counted = false;
}

Device DistributedPipeline::device() {
  for (const Tensor& p : stage_.parameters()) return p.device();
  return Device::cpu();
}

std::vector<Tensor> DistributedPipeline::counted_elsewhere() {
  std::vector<Tensor> out;
  for (const auto& [name, p] : stage_.named_parameters())
    for (const Tied& t : tied_)
      if (t.name == name && !t.counted_here) out.push_back(p);
  return out;
}

namespace {

// The messages between stages on ranks: activations and gradients on two groups of their own,
// posted in micro-batch order (the order the neighbour reads them), so that a forward's message
// never waits behind a backward's.
class MessageTransport : public StageTransport {
 public:
  MessageTransport(Communicator& activations, Communicator& gradients, int stage, Device device)
      : activations_(activations), gradients_(gradients), k_(stage), device_(device) {}
  Tensor take_activation(int64_t) override { return recv_tensor(activations_, k_ - 1, device_); }
  void put_activation(int64_t, const Tensor& y) override {
    send_tensor(activations_, y, k_ + 1, sends_);
  }
  Tensor take_gradient(int64_t, const Tensor& output) override {
    Tensor g = empty(output.shape(), {.dtype = output.dtype(), .device = device_});
    gradients_.recv(g, k_ + 1)->wait();
    return g;
  }
  void put_gradient(int64_t, const Tensor& g) override {
    sends_.push_back(gradients_.send(g, k_ - 1));
  }
  void wait_for_sends() {
    for (const WorkPtr& w : sends_) w->wait();
    sends_.clear();
  }

 private:
  Communicator& activations_;
  Communicator& gradients_;
  int k_;
  Device device_;
  std::vector<WorkPtr> sends_;
};

}  // namespace

DistributedPipelineResult DistributedPipeline::step(const Tensor& input, const Tensor& target,
                                                    const LossFn& loss, double loss_scale) {
  TD_CHECK_VALUE(GradMode::is_enabled(),
                 "DistributedPipeline::step: gradients are off (NoGradGuard); use evaluate()");
  if (is_last())
    TD_CHECK_VALUE(target.defined(), "DistributedPipeline::step: the last stage needs the target");
  return run(input, &target, &loss, loss_scale);
}

Tensor DistributedPipeline::evaluate(const Tensor& input) {
  NoGradGuard no_grad;
  return run(input, nullptr, nullptr, 1).output;
}

DistributedPipelineResult DistributedPipeline::run(const Tensor& input, const Tensor* target,
                                                   const LossFn* loss, double loss_scale) {
  const bool training = target != nullptr;
  const int k = stage_index();
  const int64_t m = options_.chunks;
  const Device dev = device();
  std::vector<Tensor> inputs, targets;
  std::vector<int64_t> sizes;
  int64_t batch = 0;
  if (is_first()) {
    TD_CHECK_VALUE(input.defined() && input.dim() >= 1 && input.size(0) >= m,
                   "DistributedPipeline: the first stage needs an input batch of at least ", m,
                   " samples (one per micro-batch)");
    TD_CHECK_VALUE(!input.requires_grad(),
                   "DistributedPipeline: the input requires grad, but it is data: gradients stop "
                   "at stage 0");
    inputs = tandem::split(input, micro_batch_sizes(input.size(0), m));
  }
  if (is_last() && training) {
    batch = target->size(0);
    TD_CHECK_VALUE(batch >= m, "DistributedPipeline: ", m, " chunks but the target has only ",
                   batch, " samples");
    sizes = micro_batch_sizes(batch, m);
    targets = tandem::split(*target, sizes);
  }
  std::vector<PipelineAction> actions;
  if (training) {
    actions = stage_actions(options_.schedule, k, stages(), m);
  } else {
    for (int64_t i = 0; i < m; ++i) actions.push_back({PipelineAction::Forward, i});
  }
  StageStep mine{
      .first = is_first(),
      .last = is_last(),
      .training = training,
      .device = dev,
      .where = str("pipeline stage ", k, " of ", stages(), " on ", dev),
      .forward = [this](const Tensor& x, int64_t) { return forward_ ? forward_(x) : stage_(x); },
      .inputs = std::move(inputs),
      .before_backward = before_backward_};
  if (is_last() && training) {
    mine.targets = std::move(targets), mine.sizes = sizes, mine.batch = batch;
    mine.loss = *loss, mine.loss_scale = loss_scale;
  }
  std::map<std::string, Tensor> tied_before;  // to sum only what this step adds (see below)
  if (training)
    for (const auto& [name, p] : stage_.named_parameters())
      for (const Tied& t : tied_)
        if (t.name == name && p.grad().defined()) tied_before[name] = p.grad().clone();
  const int64_t start = trace::now_us();
  MessageTransport transport(*activations_, *gradients_, k, dev);
  StageResult done = run_stage(actions, mine, transport);
  transport.wait_for_sends();  // a send never holds up the schedule: waited for at the end

  DistributedPipelineResult result;
  if (is_last()) result.output = cat(done.outputs);
  if (training) {
    sum_tied_gradients(tied_before);
    // The loss is the last stage's; every rank gets it, to log or to stop on. Summed on the
    // device: reading it per micro-batch would wait for the GPU each time.
    Tensor loss_sum = empty({1}, {.dtype = kFloat64, .device = dev});
    if (is_last()) {
      loss_sum.fill_(0);
      for (const Tensor& part : done.losses) loss_sum = loss_sum + part.reshape({1}).to(kFloat64);
    }
    Tensor l = loss_sum.contiguous();
    group_->broadcast(l, stages() - 1)->wait();
    result.loss = l.reshape({});
  }
  result.seconds = double(trace::now_us() - start) * 1e-6;
  result.busy_seconds = done.busy_seconds;
  return result;
}

// Each tied copy's gradient becomes the sum over its holders of what they gained this step
// (tied.h's rule, shared with the in-process pipeline): accumulating over steps counts each copy
// once.
void DistributedPipeline::sum_tied_gradients(const std::map<std::string, Tensor>& before) {
  for (const auto& [name, p] : stage_.named_parameters())
    for (const Tied& t : tied_) {
      if (t.name != name) continue;
      const auto it = before.find(name);
      sum_tied_copies({p}, {it == before.end() ? Tensor() : it->second}, t.group.get());
    }
}

}  // namespace tandem::parallel
