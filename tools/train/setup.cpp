// tools/train/setup.cpp — placing the model for its mode: the process group and mesh it joins,
// and the wrappers applied in order (pipeline stage, then DDP, ZeRO or fully_shard over "dp"),
// all writing one placement table.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/fully_sharded_stages.h>
#include <tandem/parallel/process_group.h>

#include "setup.h"

namespace tandem::tools {

Setup make_setup(std::shared_ptr<nn::Sequential> model, const Placement& p, const TrainOptions& o,
                 std::shared_ptr<parallel::DeviceMesh> mesh,
                 std::shared_ptr<parallel::PlacementTable> placements,
                 std::shared_ptr<parallel::Communicator> world) {
  Setup s{.mode = p.mode, .model = std::move(model), .device = p.device};
  s.placements = placements ? std::move(placements) : std::make_shared<parallel::PlacementTable>();
  if (o.pp > 1) {  // this rank keeps its stage: the model's other modules are let go
    s.stages = std::make_shared<parallel::DistributedPipeline>(
        *s.model, mesh->group("pp"),
        parallel::DistributedPipelineOptions{
            .chunks = o.chunks,
            .schedule = parallel::parse_schedule(o.pipeline_schedule),
            .virtual_stages = o.virtual_stages,
            .placements = s.placements});
    s.model = std::shared_ptr<nn::Sequential>(s.stages, &s.stages->stage());
  }
  parallel::move_to(*s.model, p.device, *s.placements);  // the cuts' records follow
  // The ranks data parallelism runs over: the mesh's dp, or dp × cp with --cp (each context
  // rank's gradient is its positions' share); else `world` (null: the process group's).
  std::shared_ptr<parallel::Communicator> data = std::move(world);
  std::string data_dim = "dp";
  if (mesh) {
    s.tp = mesh->group("tp");
    s.sequence_parallel = o.sequence_parallel;
    data = mesh->group("dp");
    if (o.cp > 1) {
      s.cp = mesh->group("cp");
      data = mesh->size("dp") > 1 ? mesh->flatten({"dp", "cp"}) : s.cp;
      data_dim = parallel::cp::kDataDimension;
    }
    s.expert_parallel = o.ep > 1;  // data parallelism over dp, then over ep (ep/plan.h)
    s.mesh = std::move(mesh);
  }
  switch (p.mode) {
    case Parallelism::None:
      break;
    case Parallelism::DDP:
      if (s.mesh && data->size() == 1) break;  // tensor or pipeline parallel alone
      if (o.zero == 3) {
        s.fsdp = std::make_unique<parallel::FullyShardedModule>(
            s.model, parallel::FullyShardOptions{
                         .group = data, .placements = s.placements, .mesh_dim = data_dim});
        // Each micro-batch through fully_shard, reduced once the rank's stages are all done.
        if (s.stages) parallel::fully_shard_stages(*s.stages, *s.fsdp);
        break;
      }
      s.ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(
          *s.model,
          parallel::DDPOptions{
              .group = data,
              .comm_hook = o.ddp_hook.empty() ? nullptr : parallel::comm_hook_named(o.ddp_hook),
              .zero_stage = o.zero,
              .placements = s.placements,
              .mesh_dim = data_dim});
      break;
    case Parallelism::DataParallel:  // holds the model itself: train()/eval() on it are seen
      s.dp = std::make_unique<parallel::DataParallel>(
          nn::AnyModule(s.model), parallel::DataParallelOptions{.device_ids = p.devices});
      break;
    case Parallelism::Pipeline:  // the model's own modules move to the stages' devices
    {
      const parallel::PipelineSchedule schedule = parallel::parse_schedule(o.pipeline_schedule);
      s.pipe = std::make_unique<parallel::Pipeline>(
          parallel::split(*s.model,
                          parallel::pipeline_devices(schedule, p.devices, o.virtual_stages)),
          parallel::PipelineOptions{
              .chunks = o.chunks, .schedule = schedule, .virtual_stages = o.virtual_stages});
    }
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
  if (o.tp == 1 && o.pp == 1 && o.cp == 1 && o.ep == 1)  // a mesh's checks are make_mesh's
    TD_CHECK_VALUE(o.batch_size % group->size() == 0, "train --ddp: --batch-size ", o.batch_size,
                   " (the global batch) does not split evenly over ", group->size(), " ranks");
  return group;
}

std::shared_ptr<parallel::DeviceMesh> make_mesh(std::shared_ptr<parallel::Communicator> world,
                                                const TrainOptions& o) {
  const int n = world->size(), model_ranks = o.tp * o.pp * o.cp * o.ep;
  const int dp = o.dp > 0 ? o.dp : n / model_ranks;
  std::string flags;
  for (const auto& [flag, size] :
       {std::pair{"--tp ", o.tp}, {"--pp ", o.pp}, {"--cp ", o.cp}, {"--ep ", o.ep}})
    if (size > 1) flags += str(flags.empty() ? "" : " ", flag, size);
  if (o.dp > 0) flags += str(" --dp ", o.dp);
  std::vector<int> sizes{dp};
  std::vector<std::string> names{"dp"};
  for (const auto& [name, size] : {std::pair{"pp", o.pp}, {"cp", o.cp}, {"ep", o.ep}})
    if (size > 1) sizes.push_back(size), names.emplace_back(name);
  sizes.push_back(o.tp), names.emplace_back("tp");
  std::string shape;
  for (const std::string& name : names) shape += (shape.empty() ? "" : " x ") + name;
  TD_CHECK_VALUE(n % model_ranks == 0 && dp * model_ranks == n, "train ", flags, ": the run has ",
                 n, " ranks, which is not ", shape, " (launch ", shape, " processes)");
  TD_CHECK_VALUE(o.batch_size % (dp * o.ep) == 0, "train ", flags, ": --batch-size ", o.batch_size,
                 " (the global batch) does not split evenly over ", dp * o.ep,
                 o.ep > 1 ? " data- and expert-parallel ranks" : " data-parallel ranks");
  TD_CHECK_VALUE(o.zero == 0 || dp * o.cp > 1, "train ", flags, " --zero ", o.zero,
                 ": ZeRO shards over the data-parallel ranks, and this run has one (", n,
                 " ranks = ", shape, " with dp = 1); launch more ranks, or leave --zero out");
  TD_CHECK_VALUE(o.pp == 1 || o.batch_size / dp >= o.chunks, "train ", flags, ": --chunks ",
                 o.chunks, " is more than the ", o.batch_size / dp,
                 " rows of a data-parallel rank's batch; every micro-batch needs one");
  return std::make_shared<parallel::DeviceMesh>(std::move(world), sizes, names);
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

}  // namespace tandem::tools
