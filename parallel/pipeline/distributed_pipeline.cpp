// parallel/pipeline/distributed_pipeline.cpp — one rank's stage: its loop over the schedule's
// actions, the messages to and from its neighbours, and the tied weights' gradient sums.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/schedule_check.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/pipeline/stage_runner.h>
#include <tandem/parallel/pipeline/tensor_message.h>
#include <tandem/parallel/pipeline/tied.h>
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace tandem::parallel {

DistributedPipeline::DistributedPipeline(nn::Sequential& model, std::shared_ptr<Communicator> group,
                                         DistributedPipelineOptions options)
    : group_(std::move(group)), options_(std::move(options)) {
  TD_CHECK_VALUE(group_ != nullptr, "DistributedPipeline: no group");
  TD_CHECK_VALUE(options_.chunks >= 1, "DistributedPipeline: chunks = ", options_.chunks,
                 "; a batch is cut into at least one micro-batch");
  const int ranks = group_->size(), k = group_->rank();
  order_ = pipeline_order(options_.schedule, ranks, options_.chunks, options_.virtual_stages, false,
                          options_.order, {.max_in_flight = options_.max_in_flight});
  const int64_t S = order_.stages();
  TD_CHECK_VALUE(int64_t(model.size()) >= S, "DistributedPipeline: ", S, " stages (",
                 to_string(options_.schedule), " over ", ranks, " ranks) but the model has ",
                 model.size(), " modules; each stage needs at least one");
  const std::vector<int64_t> sizes = stage_sizes(model, S, options_.balance);
  // Which ranks use each parameter, by identity: every rank sees the whole model, so every rank
  // finds the same tied weights in the same order (new_group below must be called alike).
  std::map<const TensorImpl*, std::set<int>> users;
  int64_t begin = 0;
  for (int64_t s = 0; s < S; ++s) {
    nn::Sequential modules = model.slice(size_t(begin), size_t(begin + sizes[size_t(s)]));
    const int holder = order_.stage_ranks[size_t(s)];
    for (const Tensor& p : modules.parameters()) users[&p.impl()].insert(holder);
    if (holder == k) {
      for (const nn::NamedModule& m : modules.items()) stage_.push_back(m.name, m.module.shared());
      stages_.emplace(s, std::move(modules));
    }
    begin += sizes[size_t(s)];
  }
  std::vector<int> everyone;
  for (int r = 0; r < ranks; ++r) everyone.push_back(r);
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
  // Each name's own stage (a rank may hold several): the whole state's order is one device's.
  for (auto& [s, modules] : stages_) {
    for (const auto& [name, t] : modules.state_dict())
      for (const auto& [whole, p] : model.state_dict())
        if (p.is_same(t)) {
          options_.placements->set_stage(whole, s);
          break;
        }
  }
  for (const Tensor& copy : counted_elsewhere()) options_.placements->record(copy).counted = false;
}

nn::Sequential& DistributedPipeline::stage_modules(int64_t s) {
  const auto it = stages_.find(s);
  TD_CHECK_INDEX(it != stages_.end(), "DistributedPipeline: rank ", stage_index(),
                 " does not hold stage ", s);
  return it->second;
}

std::pair<size_t, size_t> DistributedPipeline::stage_items(int64_t s) {
  const size_t n = stage_modules(s).items().size();
  size_t first = 0;
  for (const auto& [t, modules] : stages_) {  // held stages, in model order, as stage_ is
    if (t == s) break;
    first += modules.items().size();
  }
  return {first, first + n};
}

void DistributedPipeline::run_through(std::function<Tensor(const Tensor&)> forward,
                                      std::function<void(bool last)> before_backward) {
  TD_CHECK_VALUE(stages_.size() == 1, "DistributedPipeline::run_through: rank ", stage_index(),
                 " holds ", stages_.size(),
                 " stages; give a forward that takes the stage (forward(x, stage))");
  forward_ = forward ? [f = std::move(forward)](const Tensor& x, int64_t) { return f(x); }
                     : std::function<Tensor(const Tensor&, int64_t)>();
  before_backward_ = before_backward
                         ? [b = std::move(before_backward)](int64_t, bool last) { b(last); }
                         : std::function<void(int64_t, bool)>();
}

std::vector<std::vector<TimedAction>> DistributedPipeline::gather_timelines(
    const std::vector<TimedAction>& mine) {
  std::string text;                  // "1F3 12.5 13.25\n" per action: the notation, then the times
  for (const TimedAction& t : mine)  // to the microsecond
    text +=
        to_string(t.action) + " " + std::to_string(t.start) + " " + std::to_string(t.end) + "\n";
  std::vector<std::vector<TimedAction>> out;
  for (const std::string& rank : all_gather_strings(*group_, text)) {
    out.emplace_back();
    std::istringstream lines(rank);
    std::string word;
    double start = 0, end = 0;
    while (lines >> word >> start >> end)
      out.back().push_back({parse_actions(word).at(0), start, end});
  }
  return out;
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
// so that a forward's message never waits behind a backward's. Each carries its stage and
// micro-batch (tensor_message.h); a rank reads a neighbour's messages in the order they were sent
// and keeps those its schedule asks for later in a mailbox, so the two ranks' orders need not
// agree (interleaved and V schedules send a neighbour several stages' messages).
class MessageTransport : public StageTransport {
 public:
  MessageTransport(Communicator& activations, Communicator& gradients,
                   const std::vector<int>& stage_ranks, Device device)
      : activations_(activations), gradients_(gradients), ranks_(stage_ranks), device_(device) {}
  Tensor take_activation(int64_t s, int64_t i) override {
    return take(activations_, arrived_activations_, ranks_[size_t(s - 1)], {s, i});
  }
  void put_activation(int64_t s, int64_t i, const Tensor& y) override {
    send_tensor(activations_, y, ranks_[size_t(s + 1)], sends_, {s + 1, i});
  }
  Tensor take_gradient(int64_t s, int64_t i, const Tensor&) override {
    return take(gradients_, arrived_gradients_, ranks_[size_t(s + 1)], {s, i});
  }
  void put_gradient(int64_t s, int64_t i, const Tensor& g) override {
    send_tensor(gradients_, g, ranks_[size_t(s - 1)], sends_, {s - 1, i});
  }
  void wait_for_sends() {
    for (const WorkPtr& w : sends_) w->wait();
    sends_.clear();
  }

 private:
  using Mailbox = std::map<MessageTag, Tensor>;
  Tensor take(Communicator& comm, Mailbox& mailbox, int from, const MessageTag& tag) {
    for (auto it = mailbox.find(tag); it == mailbox.end(); it = mailbox.find(tag)) {
      MessageTag got{};
      Tensor t = recv_tensor(comm, from, device_, &got);
      TD_CHECK_VALUE(!mailbox.count(got), "pipeline: rank ", from, " sent stage ", got[0],
                     "'s micro-batch ", got[1], " twice");
      mailbox.emplace(got, std::move(t));
    }
    const auto it = mailbox.find(tag);
    Tensor t = std::move(it->second);
    mailbox.erase(it);
    return t;
  }

  Communicator& activations_;
  Communicator& gradients_;
  const std::vector<int>& ranks_;
  Device device_;
  Mailbox arrived_activations_, arrived_gradients_;
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
  const PipelineOrder evaluation =
      training ? PipelineOrder{} : forward_order(order_.stage_ranks, m);
  const std::vector<PipelineAction>& actions =
      training ? order_.ranks[size_t(k)] : evaluation.ranks[size_t(k)];
  RankStep mine{.training = training,
                .device = dev,
                .where = str("pipeline rank ", k, " of ", stages(), " on ", dev),
                .stage_count = order_.stages(),
                .inputs = std::move(inputs),
                .before_backward = before_backward_};
  for (auto& [s, modules] : stages_)
    mine.forward[s] = [this, s = s, &modules = modules](const Tensor& x, int64_t) {
      return forward_ ? forward_(x, s) : modules(x);
    };
  if (is_last() && training) {
    mine.targets = std::move(targets), mine.sizes = sizes, mine.batch = batch;
    mine.loss = *loss, mine.loss_scale = loss_scale;
    mine.keep_outputs = options_.return_outputs;
  }
  std::map<std::string, Tensor> tied_before;  // to sum only what this step adds (see below)
  if (training)
    for (const auto& [name, p] : stage_.named_parameters())
      for (const Tied& t : tied_)
        if (t.name == name && p.grad().defined()) tied_before[name] = p.grad().clone();
  const int64_t start = trace::now_us();
  MessageTransport transport(*activations_, *gradients_, order_.stage_ranks, dev);
  StageResult done = run_rank(actions, mine, transport);
  transport.wait_for_sends();  // a send never holds up the schedule: waited for at the end

  DistributedPipelineResult result;
  if (is_last() && !done.outputs.empty()) result.output = cat(done.outputs);
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
    group_->broadcast(l, last_rank())->wait();
    result.loss = l.reshape({});
  }
  result.seconds = double(trace::now_us() - start) * 1e-6;
  result.busy_seconds = done.busy_seconds;
  result.peak_activation_bytes = done.peak_bytes;
  result.timeline = std::move(done.timeline);
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
