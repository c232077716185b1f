// tools/train/step.cpp — placing the model for its mode, and the step's one case per mode.
#include <tandem/autograd/autocast.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/whole_state.h>
#include <cmath>

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

// Every rank of the run; null for one process.
parallel::Communicator* world_of(const Setup& s) {
  return s.mode == Parallelism::DDP ? &parallel::default_group() : nullptr;
}

// The optimizer over the table's tensors: ZeRO's inner one holds the pieces.
optim::Optimizer& table_optimizer(Setup& s, optim::Optimizer& optimizer) {
  return s.zero ? s.zero->inner() : optimizer;
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
                 std::shared_ptr<parallel::DeviceMesh> mesh,
                 std::shared_ptr<parallel::PlacementTable> placements) {
  Setup s{.mode = p.mode, .model = std::move(model), .device = p.device};
  s.placements = placements ? std::move(placements) : std::make_shared<parallel::PlacementTable>();
  if (o.pp > 1) {  // this rank keeps its stage: the model's other modules are let go
    s.stages = std::make_shared<parallel::DistributedPipeline>(
        *s.model, mesh->group("pp"),
        parallel::DistributedPipelineOptions{
            .chunks = o.chunks,
            .schedule = parallel::parse_schedule(o.pipeline_schedule),
            .placements = s.placements});
    s.model = std::shared_ptr<nn::Sequential>(s.stages, &s.stages->stage());
  }
  parallel::move_to(*s.model, p.device, *s.placements);  // the cuts' records follow
  if (mesh) {
    s.tp = mesh->group("tp");
    s.sequence_parallel = o.sequence_parallel;
    s.mesh = std::move(mesh);
  }
  switch (p.mode) {
    case Parallelism::None:
      break;
    case Parallelism::DDP:
      if (s.mesh && s.mesh->size("dp") == 1) break;  // tensor or pipeline parallel alone
      if (o.zero == 3) {
        s.fsdp = std::make_unique<parallel::FullyShardedModule>(
            s.model, parallel::FullyShardOptions{.group = s.mesh ? s.mesh->group("dp") : nullptr,
                                                 .placements = s.placements});
        if (s.stages)  // each micro-batch through fully_shard, reduced once all are in
          s.stages->run_through([f = s.fsdp.get()](const Tensor& x) { return (*f)(x); },
                                [f = s.fsdp.get()](bool last) { f->set_is_last_backward(last); });
        break;
      }
      s.ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(
          *s.model,
          parallel::DDPOptions{
              .group = s.mesh ? s.mesh->group("dp") : nullptr,
              .comm_hook = o.ddp_hook.empty() ? nullptr : parallel::comm_hook_named(o.ddp_hook),
              .zero_stage = o.zero,
              .placements = s.placements});
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
      *s.placements = parallel::placements(s.pipe->stages());  // a tied copy counted once
      break;
  }
  // No wrapper cut anything (one device, DataParallel's replicas): the model's own parameters.
  if (s.placements->entries().empty()) s.placements->keep_only(s.model->named_parameters());
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
  const int n = world->size(), model_ranks = o.tp * o.pp;
  const int dp = o.dp > 0 ? o.dp : n / model_ranks;
  const std::string flags =
      str(o.tp > 1 ? str("--tp ", o.tp) : "", o.tp > 1 && o.pp > 1 ? " " : "",
          o.pp > 1 ? str("--pp ", o.pp) : "", o.dp > 0 ? str(" --dp ", o.dp) : "");
  const std::string shape = o.pp > 1 ? "dp x pp x tp" : "dp x tp";
  TD_CHECK_VALUE(n % model_ranks == 0 && dp * model_ranks == n, "train ", flags, ": the run has ",
                 n, " ranks, which is not ", shape, " (launch ", shape, " processes)");
  TD_CHECK_VALUE(o.batch_size % dp == 0, "train ", flags, ": --batch-size ", o.batch_size,
                 " (the global batch) does not split evenly over ", dp, " data-parallel ranks");
  TD_CHECK_VALUE(o.zero == 0 || dp > 1, "train ", flags, " --zero ", o.zero, ": ZeRO shards over ",
                 "the data-parallel ranks, and this run has one (", n, " ranks = ", shape,
                 " with dp = 1); launch more ranks, or leave --zero out");
  TD_CHECK_VALUE(o.pp == 1 || o.batch_size / dp >= o.chunks, "train ", flags, ": --chunks ",
                 o.chunks, " is more than the ", o.batch_size / dp,
                 " rows of a data-parallel rank's batch; every micro-batch needs one");
  if (o.pp > 1)
    return std::make_shared<parallel::DeviceMesh>(std::move(world),
                                                  std::vector<int>{dp, o.pp, o.tp},
                                                  std::vector<std::string>{"dp", "pp", "tp"});
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
  if (s.stages)
    line = str(", pipeline", s.mesh->size("tp") > 1 ? " x tensor" : "",
               " parallel: ", s.mesh->str(), " (", group->backend(), ", ", o.pipeline_schedule,
               ", ", o.chunks, " chunks; this stage ", s.model->size(), " modules",
               s.sequence_parallel ? ", sequence parallel" : "",
               s.fsdp ? ", fully sharded over dp" : "",
               s.ddp && o.zero ? str(", ZeRO stage ", o.zero, " over dp") : "", ")");
  else if (s.tp)
    line = str(", tensor parallel: ", s.mesh->str(), " (", group->backend(),
               s.sequence_parallel ? ", sequence parallel" : "",
               s.fsdp ? ", fully sharded over dp" : "",
               s.ddp && o.zero ? str(", ZeRO stage ", o.zero, " over dp") : "", ")");
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
  // Called after the first step, when the reducer knows whether it reduced in place.
  const bool bucket_copy = !(s.ddp && s.ddp->reducer().reduces_in_place());
  // Under --pp the micro-batches' whole gradients wait in .grad for the one reduction after
  // them (no_sync), so ZeRO-2 holds ZeRO-1's gradients.
  const int stage = s.stages && o.zero == 2 ? 1 : o.zero;
  const parallel::StateBytes b =
      parallel::state_bytes(stage, psi, element, state, world, bucket_copy);
  const auto mb = [](double bytes) { return str(std::round(bytes / 1e5) / 10); };
  return str(mb(b.total()), " MB predicted (parameters ", mb(b.parameters), " + gradients ",
             mb(b.gradients), " + optimizer ", mb(b.optimizer), "), ",
             mb(double(memory_stats(s.device).allocated_bytes)), " MB held");
}

CheckpointContent checkpoint_content(Setup& s, optim::Optimizer& optimizer) {
  parallel::Communicator* world = world_of(s);
  return {parallel::full_state_dict(*s.placements, *s.model, world),
          parallel::full_optimizer_state(*s.placements, *s.model, table_optimizer(s, optimizer),
                                         world)};
}

Restore restore_into(Setup& s, optim::Optimizer& optimizer) {
  parallel::Communicator* world = world_of(s);
  optim::Optimizer& local = table_optimizer(s, optimizer);
  Restore r{[&s, world](const nn::StateDict& sd, const std::string& path) {
              parallel::load_full_state_dict(*s.placements, *s.model, sd, world, path);
              if (s.zero) s.zero->shards().gather_parameters();  // the table lists our pieces
            },
            [&s, &local, world](const optim::OptimizerState& state) {
              parallel::load_full_optimizer_state(*s.placements, *s.model, local, state, world);
            }};
  if (world == nullptr) return r;  // a sharded checkpoint is a run of ranks'
  // A sharded checkpoint of any layout: each rank reads the elements of what it trains.
  r.sharded = [&s, &local](const std::string& dir) {
    std::map<std::string, std::string> meta;
    parallel::load_sharded_checkpoint(dir, *s.placements, s.model->named_buffers(), &local, &meta);
    if (s.zero) s.zero->shards().gather_parameters();  // the table lists this rank's pieces
    return meta;
  };
  return r;
}

ShardedContent sharded_content(Setup& s, optim::Optimizer& optimizer,
                               parallel::Communicator& world) {
  return {.world = &world,
          .table = s.placements.get(),
          .buffers = s.model->named_buffers(),
          .optimizer = &table_optimizer(s, optimizer)};
}

double clip_gradients(Setup& s, double max_norm) {
  return parallel::clip_grad_norm_(*s.placements, max_norm);
}

StepResult train_step(Setup& s, const Tensor& x, const Tensor& y) {
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
    return {r.loss, r.output};
  }
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
  const bool scaling = s.scaler && s.scaler->is_enabled();  // no read of the scale: no sync
  (scaling ? s.scaler->scale(loss) : loss).backward();
  // Sequence parallelism's replicated tensors saw only this rank's positions: their gradients
  // are Partial along "tp", summed here.
  parallel::reduce_partial_gradients(*s.placements);
  return {loss.detach(), logits};
}

double eval_loss(Setup& s, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  if (!s.stages) {
    const Tensor logits = s.mode == Parallelism::DDP && !s.fsdp ? (*s.model)(x) : forward(s, x);
    return s.loss(logits, y.to(logits.device())).item();
  }
  // The last stage has the logits: its loss goes to every stage.
  const Tensor out = s.stages->evaluate(x);
  Tensor loss = from_vector(std::vector<double>{s.stages->is_last() ? s.loss(out, y).item() : 0},
                            {1}, s.device);
  s.stages->group()->broadcast(loss, s.stages->stages() - 1)->wait();
  return loss.item();
}

Tensor predict(Setup& s, const Tensor& x) {
  NoGradGuard no_grad;
  AmpScope amp(s.device, s.amp);
  return s.mode == Parallelism::DDP && !s.fsdp ? (*s.model)(x) : forward(s, x);
}

}  // namespace tandem::tools
