// tools/train/step.cpp — the step's one case per mode (setup.cpp places the model for it).
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/parallel/clip_grad_norm.h>

#include "step.h"

namespace tandem::tools {
namespace {

// --amp: autocast for the scope, in `amp` on `device`'s type; float32 turns it off.
struct AmpScope : AutocastGuard {
  AmpScope(Device device, DType amp)
      : AutocastGuard(device.type(), amp == kFloat32 ? kBFloat16 : amp, amp != kFloat32) {}
};

// The pipelines take the scale as a number: a host read of the scaler's device (one sync).
double loss_scale(const Setup& s) {
  return s.scaler && s.scaler->is_enabled() ? s.scaler->get_scale() : 1;
}

Tensor forward(Setup& s, const Tensor& x) {
  switch (s.mode) {
    case Parallelism::None:
      return (*s.model)(x);
    case Parallelism::DDP:
      return s.fsdp ? (*s.fsdp)(x) : s.ddp ? (*s.ddp)(x) : (*s.model)(x);  // --tp 2 --dp 1
    case Parallelism::DataParallel:
      return (*s.dp)(x);
    case Parallelism::Pipeline:
      return s.pipe->evaluate(x);  // no graph: for predict()
  }
  return {};
}

// --cp: this rank's positions of a batch's ids or targets [B, T] (any other run: the batch).
Tensor positions_of(const Setup& s, const Tensor& batch) {
  return s.cp ? parallel::cp::shard_batch(batch, *s.cp, s.cp_split) : batch;
}

// --cp: the mean of the context ranks' losses, each over its positions (equal counts): the
// whole sequence's loss, for the log. The gradients need no such step: data parallelism over
// dp × cp averages them.
Tensor whole_sequence_loss(const Setup& s, Tensor loss) {
  if (!s.cp) return loss;
  Tensor mean = loss.detach().reshape({1}).to(kFloat64).clone();
  s.cp->all_reduce(mean)->wait();
  return (mean / double(s.cp->size())).reshape({}).to(loss.dtype());
}

}  // namespace

double clip_gradients(Setup& s, double max_norm) {
  return parallel::clip_grad_norm_(*s.placements, max_norm);
}

StepResult train_step(Setup& s, const Tensor& whole_x, const Tensor& whole_y) {
  const Tensor x = positions_of(s, whole_x), y = positions_of(s, whole_y);
  if (s.stages) {  // forward and backward micro-batch by micro-batch, stage by stage
    const auto step = [&] {
      AmpScope amp(s.device, s.amp);
      return s.stages->step(x, y, s.loss, loss_scale(s));
    };
    parallel::DistributedPipelineResult r;
    if (s.ddp) {  // the micro-batches' gradients accumulate, then are reduced over dp once
      {
        const auto quiet = s.ddp->no_sync();
        r = step();
      }
      s.ddp->reduce_gradients();  // averaged, or ZeRO's pieces reduce-scattered
    } else {
      r = step();
    }
    parallel::reduce_partial_gradients(*s.placements);  // sequence parallelism's, over tp
    s.step_timelines = {std::move(r.timeline)};         // for the report (pipeline_report.h)
    return {whole_sequence_loss(s, r.loss), r.output};
  }
  if (s.mode == Parallelism::Pipeline) {  // forward and backward, micro-batch by micro-batch
    AmpScope amp(s.device, s.amp);
    parallel::PipelineResult r = s.pipe->step(x, y, s.loss, loss_scale(s));
    s.step_timelines = std::move(r.timeline);
    return {r.loss, r.output};
  }
  Tensor logits, loss, trained;
  {
    AmpScope amp(s.device, s.amp);  // the forward and the loss; backward runs outside
    logits = forward(s, x);
    loss = s.loss(logits, y);
    // --n-experts: the balance and z-losses train too (the log shows the model's loss alone).
    trained = s.moe ? loss + nn::moe_aux_loss(*s.model) : loss;
  }
  const bool scaling = s.scaler && s.scaler->is_enabled();  // no read of the scale: no sync
  (scaling ? s.scaler->scale(trained) : trained).backward();
  if (s.expert_parallel) parallel::ep::reduce_gradients(*s.placements);  // --ep: over ep
  // Sequence parallelism's replicated tensors saw only this rank's positions: their gradients
  // are Partial along "tp", summed here.
  parallel::reduce_partial_gradients(*s.placements);
  return {whole_sequence_loss(s, loss.detach()), logits};
}

double eval_loss(Setup& s, const Tensor& whole_x, const Tensor& whole_y) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  const Tensor x = positions_of(s, whole_x), y = positions_of(s, whole_y);
  if (!s.stages) {
    const Tensor logits = s.mode == Parallelism::DDP && !s.fsdp ? (*s.model)(x) : forward(s, x);
    return whole_sequence_loss(s, s.loss(logits, y.to(logits.device()))).item();
  }
  // The last stage has the logits: its loss goes to every stage.
  const Tensor out = s.stages->evaluate(x);
  Tensor loss = from_vector(std::vector<double>{s.stages->is_last() ? s.loss(out, y).item() : 0},
                            {1}, s.device);
  s.stages->group()->broadcast(loss, s.stages->last_rank())->wait();
  return whole_sequence_loss(s, loss.reshape({})).item();
}

Tensor predict(Setup& s, const Tensor& x) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  return s.mode == Parallelism::DDP && !s.fsdp ? (*s.model)(x) : forward(s, x);
}

}  // namespace tandem::tools
