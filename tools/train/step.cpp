// tools/train/step.cpp — placing the model for its mode, and the step's one case per mode.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>

#include "step.h"

namespace tandem::tools {
namespace {

// --amp: autocast for the scope, in `amp` on `device`'s type; float32 turns it off.
struct AmpScope : AutocastGuard {
  AmpScope(Device device, DType amp)
      : AutocastGuard(device.type(), amp == kFloat32 ? kBFloat16 : amp, amp != kFloat32) {}
};

double loss_scale(const Setup& s) {
  return s.scaler && s.scaler->is_enabled() ? s.scaler->get_scale() : 1;
}

Tensor forward(Setup& s, const Tensor& x) {
  switch (s.mode) {
    case Parallelism::None:
      return (*s.model)(x);
    case Parallelism::DDP:
      return (*s.ddp)(x);
    case Parallelism::DataParallel:
      return (*s.dp)(x);
    case Parallelism::Pipeline:
      return s.pipe->evaluate(x);  // no graph: for predict()
  }
  return {};
}

}  // namespace

Setup make_setup(std::shared_ptr<nn::Sequential> model, const Placement& p, const TrainOptions& o) {
  Setup s{.mode = p.mode, .model = std::move(model), .device = p.device};
  s.model->to(p.device);
  switch (p.mode) {
    case Parallelism::None:
      break;
    case Parallelism::DDP:
      s.ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(*s.model);
      break;
    case Parallelism::DataParallel:  // holds the model itself: train()/eval() on it are seen
      s.dp = std::make_unique<parallel::DataParallel>(
          nn::AnyModule(s.model), parallel::DataParallelOptions{.device_ids = p.devices});
      break;
    case Parallelism::Pipeline:  // the model's own modules move to the stages' devices
      s.pipe = std::make_unique<parallel::Pipeline>(
          parallel::split(*s.model, p.devices),
          parallel::PipelineOptions{.chunks = o.chunks,
                                    .schedule = parallel::parse_schedule(o.pipeline_schedule)});
      break;
  }
  return s;
}

StepResult train_step(Setup& s, const Tensor& x, const Tensor& y) {
  if (s.mode == Parallelism::Pipeline) {  // forward and backward, micro-batch by micro-batch
    AmpScope amp(s.device, s.amp);
    const parallel::PipelineResult r = s.pipe->step(
        x, y, [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); },
        loss_scale(s));
    return {r.loss, r.output};
  }
  Tensor logits, loss;
  {
    AmpScope amp(s.device, s.amp);  // the forward and the loss; backward runs outside
    logits = forward(s, x);
    loss = cross_entropy(logits, y);
  }
  (loss_scale(s) == 1 ? loss : s.scaler->scale(loss)).backward();
  return {loss.detach(), logits};
}

Tensor predict(Setup& s, const Tensor& x) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  return s.mode == Parallelism::DDP ? (*s.model)(x) : forward(s, x);
}

}  // namespace tandem::tools
