// tools/train/step.cpp — placing the model for its mode, and the step's one case per mode.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/tp/model_state.h>
#include <cmath>

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
      return s.fsdp ? (*s.fsdp)(x) : s.ddp ? (*s.ddp)(x) : (*s.model)(x);  // --tp 2 --dp 1
    case Parallelism::DataParallel:
      return (*s.dp)(x);
    case Parallelism::Pipeline:
      return s.pipe->evaluate(x);  // no graph: for predict()
  }
  return {};
}

}  // namespace

Setup make_setup(std::shared_ptr<nn::Sequential> model, const Placement& p, const TrainOptions& o,
                 std::shared_ptr<parallel::DeviceMesh> mesh) {
  Setup s{.mode = p.mode, .model = std::move(model), .device = p.device};
  s.model->to(p.device);
  if (mesh) {
    s.tp = mesh->group("tp");
    s.sequence_parallel = o.sequence_parallel;
    s.mesh = std::move(mesh);
  }
  switch (p.mode) {
    case Parallelism::None:
      break;
    case Parallelism::DDP:
      if (s.mesh && s.mesh->size("dp") == 1) break;  // tensor parallel alone
      if (o.zero == 3) {
        s.fsdp = std::make_unique<parallel::FullyShardedModule>(
            s.model, parallel::FullyShardOptions{.group = s.mesh ? s.mesh->group("dp") : nullptr});
        break;
      }
      s.ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(
          *s.model,
          parallel::DDPOptions{
              .group = s.mesh ? s.mesh->group("dp") : nullptr,
              .comm_hook = o.ddp_hook.empty() ? nullptr : parallel::comm_hook_named(o.ddp_hook),
              .zero_stage = o.zero});
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

std::shared_ptr<parallel::Communicator> join_ddp_group(Placement& p, const TrainOptions& o) {
  if (p.device.is_cuda()) p.device = parallel::local_device();  // LOCAL_RANK
  auto group = parallel::init_process_group({.device = p.device});
  if (o.tp == 1)
    TD_CHECK_VALUE(o.batch_size % group->size() == 0, "train --ddp: --batch-size ", o.batch_size,
                   " (the global batch) does not split evenly over ", group->size(), " ranks");
  return group;
}

std::shared_ptr<parallel::DeviceMesh> make_mesh(std::shared_ptr<parallel::Communicator> world,
                                                const TrainOptions& o) {
  const int n = world->size(), dp = o.dp > 0 ? o.dp : n / o.tp;
  TD_CHECK_VALUE(n % o.tp == 0 && dp * o.tp == n, "train --tp ", o.tp,
                 o.dp > 0 ? str(" --dp ", o.dp) : "", ": the run has ", n,
                 " ranks, which is not dp x tp (launch dp x tp processes)");
  TD_CHECK_VALUE(o.batch_size % dp == 0, "train --tp: --batch-size ", o.batch_size,
                 " (the global batch) does not split evenly over ", dp, " data-parallel ranks");
  return std::make_shared<parallel::DeviceMesh>(std::move(world), std::vector<int>{dp, o.tp},
                                                std::vector<std::string>{"dp", "tp"});
}

std::unique_ptr<optim::GradScaler> make_grad_scaler(DType amp, parallel::Communicator* group,
                                                    Device device) {
  std::function<void(Tensor&)> all_reduce;
  if (group)
    all_reduce = [group, device](Tensor& t) {
      Tensor d = t.to(device);
      group->all_reduce(d)->wait();
      t.copy_(d);
    };
  return std::make_unique<optim::GradScaler>(
      optim::GradScalerOptions{.enabled = amp == kFloat16, .all_reduce = all_reduce});
}

std::string describe_parallelism(Setup& s, const TrainOptions& o,
                                 const parallel::Communicator* group) {
  std::string line;
  if (s.tp)
    line = str(", tensor parallel: ", s.mesh->str(), " (", group->backend(),
               s.sequence_parallel ? ", sequence parallel" : "",
               s.fsdp ? ", fully sharded over dp" : "", ")");
  else if (s.fsdp)
    line = str(", fully sharded over ", group->size(), " ranks (", group->backend(),
               ", ZeRO stage 3: ", s.fsdp->units().size(), " units)");
  if (s.ddp && !s.tp)
    line = str(", DDP over ", group->size(), " ranks (", group->backend(),
               o.ddp_hook.empty() ? "" : ", " + o.ddp_hook,
               o.zero ? str(", ZeRO stage ", o.zero) : "", ")");
  if (s.dp) line = str(", DataParallel over ", o.data_parallel);
  if (s.pipe) {
    std::string sizes;
    for (parallel::Stage& stage : s.pipe->stages())
      sizes += (sizes.empty() ? "" : " + ") + std::to_string(stage.modules.size());
    line = str(", pipeline over ", o.pipeline, " (", o.pipeline_schedule, ", ", o.chunks,
               " chunks; stages of ", sizes, " modules)");
  }
  if (s.amp != kFloat32)
    line += str(", autocast ", o.amp, s.amp == kFloat16 ? " with a gradient scaler" : "");
  return line;
}

std::string memory_line(const Setup& s, const TrainOptions& o, int world) {
  double psi = 0, element = 4;
  for (const Tensor& p : s.model->parameters()) {
    psi += double(p.numel());
    element = double(element_size(p.dtype()));
  }
  if (s.fsdp) psi = double(s.fsdp->whole_parameter_count());  // the fields hold shards
  // Adam and AdamW keep two moments per parameter; SGD a momentum buffer if it has momentum.
  const int state = o.model == "gpt" || o.optimizer != "sgd" ? 2 : o.momentum > 0 ? 1 : 0;
  const parallel::StateBytes b = parallel::state_bytes(o.zero, psi, element, state, world);
  const auto mb = [](double bytes) { return str(std::round(bytes / 1e5) / 10); };
  return str(mb(b.total()), " MB predicted (parameters ", mb(b.parameters), " + gradients ",
             mb(b.gradients), " + optimizer ", mb(b.optimizer), "), ",
             mb(double(memory_stats(s.device).allocated_bytes)), " MB held");
}

CheckpointContent checkpoint_content(Setup& s, optim::Optimizer& optimizer) {
  if (s.tp && s.fsdp)  // whole over dp (fully_shard), then over tp: every rank takes part
    return {parallel::tp::put_slices_together(*s.model, s.fsdp->full_state_dict(), s.tp),
            parallel::tp::put_slices_together(*s.model, optimizer,
                                              s.fsdp->full_optimizer_state_dict(optimizer), s.tp)};
  if (s.tp)  // every rank of the group takes part; all hold the whole tensors then
    return {parallel::tp::full_state_dict(*s.model, s.tp),
            parallel::tp::full_optimizer_state(*s.model, optimizer, s.tp)};
  if (s.fsdp)
    return {s.fsdp->full_state_dict(/*rank0_only=*/true),
            s.fsdp->full_optimizer_state_dict(optimizer, /*rank0_only=*/true)};
  if (s.zero) s.zero->consolidate_state_dict();
  return {s.model->state_dict(), optimizer.state_dict()};
}

Restore restore_into(Setup& s, optim::Optimizer& optimizer) {
  if (s.tp && s.fsdp)  // this rank's slices, of which fully_shard keeps its rows
    return {[&s](const nn::StateDict& sd, const std::string& path) {
              s.fsdp->load_full_state_dict(parallel::tp::slices_of(*s.model, sd, s.tp), path);
            },
            [&s, &optimizer](const optim::OptimizerState& state) {
              s.fsdp->load_full_optimizer_state_dict(
                  optimizer, parallel::tp::slices_of(*s.model, optimizer, state, s.tp));
            }};
  if (s.tp)  // a checkpoint of any tensor-parallel size: each rank takes its slices
    return {[&s](const nn::StateDict& sd, const std::string& path) {
              parallel::tp::load_full_state_dict(*s.model, sd, s.tp, path);
            },
            [&s, &optimizer](const optim::OptimizerState& state) {
              parallel::tp::load_full_optimizer_state(*s.model, optimizer, state, s.tp);
            }};
  if (s.fsdp)
    return {[&s](const nn::StateDict& sd, const std::string& path) {
              s.fsdp->load_full_state_dict(sd, path);
            },
            [&s, &optimizer](const optim::OptimizerState& state) {
              s.fsdp->load_full_optimizer_state_dict(optimizer, state);
            }};
  return {[&s](const nn::StateDict& sd, const std::string& path) {
            s.model->load_state_dict(sd, true, path);
          },
          [&optimizer](const optim::OptimizerState& state) { optimizer.load_state_dict(state); }};
}

parallel::Communicator* sharded_gradients_group(Setup& s) {
  if (s.fsdp) return &s.fsdp->group();
  if (s.zero) return &s.zero->shards().group();
  return nullptr;
}

double clip_gradients(Setup& s, double max_norm) {
  if (s.tp)  // fully sharded: the squares summed over dp too
    return parallel::tp::clip_grad_norm_(*s.model, max_norm, s.tp,
                                         s.fsdp ? &s.fsdp->group() : nullptr);
  if (s.pipe) return parallel::clip_grad_norm_(s.pipe->stages(), max_norm);
  if (s.zero) return s.zero->clip_grad_norm(max_norm);  // each rank holds its shard's gradients
  if (s.fsdp) return s.fsdp->clip_grad_norm(max_norm);
  return optim::clip_grad_norm_(s.model->parameters(), max_norm);
}

StepResult train_step(Setup& s, const Tensor& x, const Tensor& y) {
  if (s.mode == Parallelism::Pipeline) {  // forward and backward, micro-batch by micro-batch
    AmpScope amp(s.device, s.amp);
    const parallel::PipelineResult r = s.pipe->step(x, y, s.loss, loss_scale(s));
    return {r.loss, r.output};
  }
  Tensor logits, loss;
  {
    AmpScope amp(s.device, s.amp);  // the forward and the loss; backward runs outside
    logits = forward(s, x);
    loss = s.loss(logits, y);
  }
  (loss_scale(s) == 1 ? loss : s.scaler->scale(loss)).backward();
  // The replicated tensors saw only this rank's positions: sum their gradients over the group.
  if (s.sequence_parallel) parallel::tp::reduce_sequence_parallel_gradients(*s.model, s.tp);
  return {loss.detach(), logits};
}

Tensor predict(Setup& s, const Tensor& x) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  return s.mode == Parallelism::DDP && !s.fsdp ? (*s.model)(x) : forward(s, x);
}

}  // namespace tandem::tools
