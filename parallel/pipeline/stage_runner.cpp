// parallel/pipeline/stage_runner.cpp — a stage's loop over its actions.
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

StageResult run_stage(const std::vector<PipelineAction>& actions, const StageStep& step,
                      StageTransport& transport) {
  const Device dev = step.device;
  int64_t m = 0;  // micro-batches
  for (const PipelineAction& a : actions) m = std::max(m, a.micro_batch + 1);
  StageResult result;
  if (step.last) result.outputs.resize(size_t(m));
  if (step.last && step.training) result.losses.resize(size_t(m));
  autograd::DeferredWeightGrads deferred;  // every micro-batch's, for the W action
  // Per micro-batch: the stage's input (a leaf, to read its gradient from) and the root its
  // backward starts from (its output, or on the last stage the weighted loss).
  std::vector<Tensor> inputs(static_cast<size_t>(m)), roots(static_cast<size_t>(m));

  const auto forward = [&](size_t i, Tensor x) {
    x = x.to(dev).detach();
    if (!step.first && step.training) x.requires_grad_(true);
    const Tensor y = step.forward(x, int64_t(i));
    if (step.last) {
      result.outputs[i] = y.detach();
      if (step.training) {
        const Tensor l = step.loss(y, step.targets[i].to(dev));
        TD_CHECK_SHAPE(l.numel() == 1, "the loss function returned shape ", l.shape(),
                       " instead of one value (the micro-batch's mean)");
        const double weight = double(step.sizes[i]) / double(step.batch);
        roots[i] = (step.loss_scale == 1 ? l : l * step.loss_scale) * weight;
        result.losses[i] = step.loss_scale == 1 ? roots[i].detach() : (l * weight).detach();
      }
    } else {
      if (step.training) roots[i] = y;
      transport.put_activation(int64_t(i), y.detach());
    }
    if (step.training) inputs[i] = x;
  };
  const auto backward = [&](size_t i, const Tensor& grad_output) {
    deferred.append(
        autograd::backward(roots[i], {.grad_output = step.last ? Tensor() : grad_output.to(dev),
                                      .defer_weight_grads = step.defer_weight_grads}));
    if (!step.first) {
      const Tensor g = inputs[i].grad();
      TD_CHECK_VALUE(g.defined(),
                     "the stage's output does not depend on its input, so no "
                     "gradient can flow to the stages before it");
      transport.put_gradient(int64_t(i), g.contiguous());
    }
    inputs[i] = Tensor();  // this micro-batch's activations on this stage are freed here
    roots[i] = Tensor();
  };

  size_t backwards = 0;  // left in the step
  for (const PipelineAction& a : actions) backwards += a.kind == PipelineAction::Backward;
  const int64_t baseline = memory_stats(dev).allocated_bytes;
  for (const PipelineAction& a : actions) {
    if (transport.aborted()) return result;
    const size_t i = size_t(std::max<int64_t>(a.micro_batch, 0));
    const bool is_forward = a.kind == PipelineAction::Forward;
    try {
      // The neighbour's message first: the wait is idle time, outside the action's span.
      Tensor received;
      if (is_forward)
        received = step.first ? step.inputs[i] : transport.take_activation(int64_t(i));
      else if (a.kind == PipelineAction::Backward && !step.last)
        received = transport.take_gradient(int64_t(i), roots[i]);
      const int64_t start = trace::now_us();
      {
        const trace::Scope span("pipeline", trace::enabled() ? to_string(a) : "");
        if (is_forward)
          forward(i, std::move(received));
        else if (a.kind == PipelineAction::Backward) {
          if (step.before_backward) step.before_backward(--backwards == 0);
          backward(i, received);
        } else
          deferred.run();  // W: every micro-batch's Linear weight gradients into .grad
      }
      result.busy_seconds += double(trace::now_us() - start) * 1e-6;
    } catch (const Exchange::Aborted&) {
      throw;  // another stage failed, and says so
    } catch (...) {
      std::rethrow_exception(::tandem::detail::with_context(
          std::current_exception(), a.kind == PipelineAction::Weight
                                        ? str(step.where, ", weight gradients (W)")
                                        : str(step.where, ", micro-batch ", i, " (",
                                              is_forward ? "forward" : "backward", ")")));
    }
    result.peak_bytes = std::max(result.peak_bytes, memory_stats(dev).allocated_bytes - baseline);
  }
  return result;
}

}  // namespace tandem::parallel
