// parallel/pipeline/distributed_pipeline.cpp — one rank's stage: its loop over the schedule's
// actions, the messages to and from its neighbours, and the tied weights' gradient sums.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/split.h>
#include <tandem/parallel/pipeline/tensor_message.h>
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
  // Per micro-batch: the stage's input (a leaf, to read its gradient from) and the root its
  // backward starts from (its output, or on the last stage the weighted loss).
  std::vector<Tensor> stage_inputs(static_cast<size_t>(m)), roots(static_cast<size_t>(m)), outputs;
  std::vector<WorkPtr> sends;  // waited for at the end: a send never holds up the schedule
  Tensor loss_sum;  // on the device: reading it per micro-batch would wait for the GPU each time
  double busy = 0;
  std::map<std::string, Tensor> tied_before;  // to sum only what this step adds (see below)
  if (training)
    for (const auto& [name, p] : stage_.named_parameters())
      for (const Tied& t : tied_)
        if (t.name == name && p.grad().defined()) tied_before[name] = p.grad().clone();
  const int64_t start = trace::now_us();

  for (const PipelineAction& a : actions) {
    const size_t i = size_t(a.micro_batch);
    const bool is_forward = a.kind == PipelineAction::Forward;
    try {
      if (is_forward) {
        Tensor x = is_first() ? inputs[i].to(dev) : recv_tensor(*activations_, k - 1, dev);
        const int64_t t0 = trace::now_us();
        x = x.detach();
        if (!is_first() && training) x.requires_grad_(true);
        const Tensor y = stage_(x);
        if (is_last()) {
          outputs.push_back(y.detach());
          if (training) {
            const Tensor l = (*loss)(y, targets[i].to(dev));
            TD_CHECK_SHAPE(l.numel() == 1, "the loss function returned shape ", l.shape(),
                           " instead of one value (the micro-batch's mean)");
            const double weight = double(sizes[i]) / double(batch);
            roots[i] = (loss_scale == 1 ? l : l * loss_scale) * weight;
            const Tensor part = l.detach().reshape({1}).to(kFloat64) * weight;
            loss_sum = loss_sum.defined() ? loss_sum + part : part;
          }
        } else {
          if (training) roots[i] = y;
          send_tensor(*activations_, y.detach(), k + 1, sends);
        }
        if (training) stage_inputs[i] = x;
        busy += double(trace::now_us() - t0) * 1e-6;
      } else {
        Tensor grad_output;
        if (!is_last()) {
          grad_output = empty(roots[i].shape(), {.dtype = roots[i].dtype(), .device = dev});
          gradients_->recv(grad_output, k + 1)->wait();
        }
        const int64_t t0 = trace::now_us();
        (void)autograd::backward(roots[i], {.grad_output = grad_output});
        if (!is_first()) {
          const Tensor g = stage_inputs[i].grad();
          TD_CHECK_VALUE(g.defined(),
                         "the stage's output does not depend on its input, so no "
                         "gradient can flow to the stages before it");
          sends.push_back(gradients_->send(g.contiguous(), k - 1));
        }
        stage_inputs[i] = Tensor();  // this micro-batch's activations on this stage are freed
        roots[i] = Tensor();
        busy += double(trace::now_us() - t0) * 1e-6;
      }
    } catch (...) {
      std::rethrow_exception(::tandem::detail::with_context(
          std::current_exception(),
          str("pipeline stage ", k, " of ", stages(), " on ", dev, ", micro-batch ", i, " (",
              is_forward ? "forward" : "backward", ")")));
    }
  }
  for (const WorkPtr& w : sends) w->wait();

  DistributedPipelineResult result;
  if (is_last()) result.output = cat(outputs);
  if (training) {
    sum_tied_gradients(tied_before);
    // The loss is the last stage's; every rank gets it, to log or to stop on.
    Tensor l = is_last() ? loss_sum.contiguous() : empty({1}, {.dtype = kFloat64, .device = dev});
    group_->broadcast(l, stages() - 1)->wait();
    result.loss = l.reshape({});
  }
  result.seconds = double(trace::now_us() - start) * 1e-6;
  result.busy_seconds = busy;
  return result;
}

// Each tied copy's gradient becomes the sum over its holders of what they gained this step. A
// gradient already accumulated before the step is equal on every holder (it was summed then),
// so only the step's part is summed: accumulating over steps counts each copy once.
void DistributedPipeline::sum_tied_gradients(const std::map<std::string, Tensor>& before) {
  NoGradGuard no_grad;
  for (const auto& [name, p] : stage_.named_parameters())
    for (const Tied& t : tied_) {
      if (t.name != name) continue;
      Tensor g = p.grad();
      if (!g.defined()) {
        g = zeros(p.shape(), {.dtype = p.dtype(), .device = p.device()});
        p.set_grad(g);
      }
      const auto it = before.find(name);
      if (it == before.end()) {
        t.group->all_reduce(g)->wait();
      } else {
        Tensor gained = g - it->second;
        t.group->all_reduce(gained)->wait();
        g.copy_(it->second + gained);
      }
    }
}

}  // namespace tandem::parallel
