// parallel/pipeline/stage_runner.cpp — a rank's loop over its actions.
#include <tandem/autograd/deferred_weight_grads.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/pipeline/exchange.h>
#include <tandem/parallel/pipeline/stage_runner.h>
#include <algorithm>
#include <exception>

namespace tandem::parallel {
namespace {

using A = PipelineAction;
using Slot = std::pair<int64_t, int64_t>;  // stage, micro-batch

// Takes the tensor in `slots` at `key` out (undefined when there is none).
Tensor take(std::map<Slot, Tensor>& slots, const Slot& key) {
  const auto it = slots.find(key);
  if (it == slots.end()) return Tensor();
  Tensor t = std::move(it->second);
  slots.erase(it);
  return t;
}

// What a rank keeps between its actions, per stage and micro-batch.
struct RankState {
  std::map<Slot, Tensor> inputs;        // the stage's input, a leaf: its gradient goes back
  std::map<Slot, Tensor> roots;         // the stage's output, or the last stage's weighted loss
  std::map<Slot, Tensor> activations;   // a stage's input, arrived (received or left here)
  std::map<Slot, Tensor> gradients;     // the gradient of a stage's output, arrived
  std::map<Slot, Tensor> outbox;        // an output to send (after F)
  std::map<Slot, Tensor> outbox_grads;  // an input's gradient to send (after B or I)
  std::map<Slot, autograd::DeferredWeightGrads> deferred;  // I's weight gradients, for W
};

}  // namespace

PipelineOrder forward_order(const std::vector<int>& stage_ranks, int64_t micro_batches) {
  PipelineOrder order;
  order.micro_batches = micro_batches;
  order.stage_ranks = stage_ranks;
  int world = 0;
  for (int r : stage_ranks) world = std::max(world, r + 1);
  order.ranks.resize(size_t(world));
  const int64_t S = int64_t(stage_ranks.size());
  for (int64_t t = 0; t < S + micro_batches - 1; ++t)
    for (int64_t s = 0; s < S; ++s)
      if (t - s >= 0 && t - s < micro_batches)
        order.ranks[size_t(stage_ranks[size_t(s)])].push_back({A::Forward, s, t - s});
  return with_communication(order);
}

StageResult run_rank(const std::vector<PipelineAction>& actions, const RankStep& step,
                     StageTransport& transport) {
  const Device dev = step.device;
  const int64_t S = step.stage_count, last_stage = S - 1;
  const bool holds_last = step.forward.count(last_stage) != 0;
  int64_t m = 0;  // micro-batches
  for (const A& a : actions) m = std::max(m, a.micro_batch + 1);
  StageResult result;
  const bool keep_outputs = !step.training || step.keep_outputs;
  if (holds_last && keep_outputs) result.outputs.resize(size_t(m));
  if (holds_last && step.training) result.losses.resize(size_t(m));
  RankState st;
  const auto here = [&](int64_t s) { return step.forward.count(s) != 0; };

  const auto forward = [&](int64_t s, int64_t i) {
    Tensor x = s == 0 ? step.inputs.at(size_t(i)) : take(st.activations, {s, i});
    TD_CHECK_VALUE(x.defined(), "no activation arrived for it (a missing RECV_F)");
    x = x.to(dev).detach();
    if (s > 0 && step.training) x.requires_grad_(true);
    const Tensor y = step.forward.at(s)(x, i);
    if (s == last_stage) {
      if (keep_outputs) result.outputs[size_t(i)] = y.detach();
      if (step.training) {
        const Tensor l = step.loss(y, step.targets[size_t(i)].to(dev));
        TD_CHECK_SHAPE(l.numel() == 1, "the loss function returned shape ", l.shape(),
                       " instead of one value (the micro-batch's mean)");
        const double weight = double(step.sizes[size_t(i)]) / double(step.batch);
        const Tensor root = (step.loss_scale == 1 ? l : l * step.loss_scale) * weight;
        st.roots[{s, i}] = root;
        result.losses[size_t(i)] = step.loss_scale == 1 ? root.detach() : (l * weight).detach();
      }
    } else {
      if (step.training) st.roots[{s, i}] = y;
      (here(s + 1) ? st.activations[{s + 1, i}] : st.outbox[{s, i}]) = y.detach();
    }
    if (step.training) st.inputs[{s, i}] = x;
  };
  // B and I: from the loss or the stage after's gradient; the input's gradient on its way.
  std::map<int64_t, int64_t> backwards_left;  // per stage, for before_backward's "last"
  for (const A& a : actions)
    if (a.kind == A::Backward || a.kind == A::BackwardInput) ++backwards_left[a.stage];
  const auto backward = [&](int64_t s, int64_t i, bool defer) {
    const Tensor grad_output = s == last_stage ? Tensor() : take(st.gradients, {s, i});
    TD_CHECK_VALUE(s == last_stage || grad_output.defined(),
                   "no gradient arrived for it (a missing RECV_B)");
    if (step.before_backward) step.before_backward(s, --backwards_left[s] == 0);
    const Tensor root = take(st.roots, {s, i});
    autograd::DeferredWeightGrads w = autograd::backward(
        root, {.grad_output = grad_output.defined() ? grad_output.to(dev) : Tensor(),
               .defer_weight_grads = defer});
    if (defer) st.deferred[{s, i}] = std::move(w);  // without defer, w holds nothing
    const Tensor input = take(st.inputs, {s, i});   // its activations on this stage freed below
    if (s == 0) return;
    const Tensor g = input.grad();
    TD_CHECK_VALUE(g.defined(),
                   "the stage's output does not depend on its input, so no gradient can flow to "
                   "the stages before it");
    (here(s - 1) ? st.gradients[{s - 1, i}] : st.outbox_grads[{s, i}]) = g.contiguous();
  };
  const auto weights = [&](int64_t s, int64_t i) {
    if (i != A::kAll) {
      const auto it = st.deferred.find({s, i});
      TD_CHECK_VALUE(it != st.deferred.end(), "its I has not run");
      it->second.run();
      st.deferred.erase(it);
      return;
    }
    autograd::DeferredWeightGrads all;  // every micro-batch's rows in one product per weight
    for (auto it = st.deferred.begin(); it != st.deferred.end();)
      if (it->first.first == s) {
        all.append(std::move(it->second));
        it = st.deferred.erase(it);
      } else {
        ++it;
      }
    all.run();
  };

  const int64_t baseline = memory_stats(dev).allocated_bytes;
  for (const A& a : actions) {
    if (transport.aborted()) return result;
    const int64_t s = a.stage, i = a.micro_batch;
    const int64_t start = trace::now_us();
    try {
      const trace::Scope span("pipeline", trace::enabled() ? to_string(a) : "");
      switch (a.kind) {
        case A::Forward:
          forward(s, i);
          break;
        case A::Backward:
        case A::BackwardInput:
          backward(s, i, a.kind == A::BackwardInput);
          break;
        case A::BackwardWeight:
          weights(s, i);
          break;
        case A::SendForward: {
          const Tensor y = take(st.outbox, {s, i});
          TD_CHECK_VALUE(y.defined(), "its forward has not run");
          transport.put_activation(s, i, y);
          break;
        }
        case A::SendBackward: {
          const Tensor g = take(st.outbox_grads, {s, i});
          TD_CHECK_VALUE(g.defined(), "its backward has not run");
          transport.put_gradient(s, i, g);
          break;
        }
        case A::RecvForward:
          st.activations[{s, i}] = transport.take_activation(s, i);
          break;
        case A::RecvBackward: {
          const auto root = st.roots.find({s, i});
          TD_CHECK_VALUE(root != st.roots.end(), "its forward has not run");
          st.gradients[{s, i}] = transport.take_gradient(s, i, root->second);
          break;
        }
      }
    } catch (const Exchange::Aborted&) {
      throw;  // another rank failed, and says so
    } catch (...) {
      const char* kinds[] = {"forward",          "backward",        "backward of the input",
                             "weight gradients", "send forward",    "receive forward",
                             "send backward",    "receive backward"};
      std::rethrow_exception(::tandem::detail::with_context(
          std::current_exception(),
          i == A::kAll ? str(step.where, ", stage ", s, ", weight gradients (", to_string(a), ")")
                       : str(step.where, ", stage ", s, ", micro-batch ", i, " (", kinds[a.kind],
                             ", ", to_string(a), ")")));
    }
    const int64_t end = trace::now_us();
    result.timeline.push_back({a, double(start) * 1e-6, double(end) * 1e-6});
    if (a.is_compute()) result.busy_seconds += double(end - start) * 1e-6;
    result.peak_bytes = std::max(result.peak_bytes, memory_stats(dev).allocated_bytes - baseline);
  }
  return result;
}

}  // namespace tandem::parallel
