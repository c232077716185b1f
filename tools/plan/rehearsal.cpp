// tools/plan/rehearsal.cpp — two of the trainer's steps, on thread ranks over the meta device.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/rehearsal_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <mutex>

#include "../train/gpt_rank.h"
#include "../train/gpt_vocabulary.h"
#include "../train/step.h"
#include "../train/update.h"
#include "rehearsal.h"

namespace tandem::tools {
namespace {

// "dp 1, tp 0": the rank's coordinates along the mesh's dimensions of more than one rank.
std::string coordinates(const parallel::DeviceMesh& mesh, const TrainOptions& o) {
  std::string out;
  for (const auto& [name, size] : {std::pair<std::string, int>{"dp", mesh.size("dp")},
                                   {"pp", o.pp},
                                   {"cp", o.cp},
                                   {"ep", o.ep},
                                   {"tp", o.tp}})
    if (size > 1) out += str(out.empty() ? "" : ", ", name, " ", mesh.coordinate(name));
  return out;
}

// One rank: what gpt_train.cpp does up to its second step, with the probe at the same points.
RankMemory rehearse_rank(const TrainOptions& o, int64_t characters,
                         std::shared_ptr<parallel::RehearsalCommunicator> group,
                         std::shared_ptr<CallTable> calls) {
  const int rank = group ? group->rank() : 0, world = group ? group->size() : 1;
  const Device device = Device::meta(rank);
  std::shared_ptr<StepTrace> trace = calls ? std::make_shared<StepTrace>(rank, calls) : nullptr;
  if (group && trace) group->observe(trace);
  Placement placement{.mode = group ? Parallelism::DDP : Parallelism::None, .device = device};
  MemoryProbe probe(device);
  std::shared_ptr<parallel::DeviceMesh> mesh =
      o.tp > 1 || o.pp > 1 || o.cp > 1 || o.ep > 1 ? make_mesh(group, o) : nullptr;
  GptRank r =
      build_gpt_rank(o, characters, table_rows(o.gpt, characters, o), placement, group, mesh);
  probe.placed();
  r.setup.model->train();
  const int64_t rows = mesh ? o.batch_size / (mesh->size("dp") * o.ep) : o.batch_size / world;
  const int replica = mesh ? mesh->coordinate("dp") : rank;
  uint64_t wire = 0;  // bytes on the wire before the second step, then during it
  for (int step = 0; step < 2; ++step) {
    // The global batch, as the trainer draws it on its device, and this rank's rows of it.
    const TensorOptions ids{.dtype = kInt64, .device = device};
    const Tensor x = empty({o.batch_size, o.gpt.block_size}, ids);
    const Tensor y = empty({o.batch_size, o.gpt.block_size}, ids);
    if (trace && step == 1) trace->start();
    r.optimizer->zero_grad();
    probe.step_begins();
    if (group && step == 1) wire = group->wire().total_bytes();
    const StepResult s =
        train_step(r.setup, x.narrow(0, rows * replica, rows), y.narrow(0, rows * replica, rows));
    step_optimizer(r.setup, *r.optimizer);
    probe.step_ends();
  }
  if (trace) trace->stop();
  if (group) wire = group->wire().total_bytes() - wire;
  return {.rank = rank,
          .where = mesh ? coordinates(*mesh, o) : "",
          .terms = probe.terms(),
          .wire_bytes = wire,
          .trace = trace ? trace->take() : RankTrace{}};
}

}  // namespace

std::vector<RankMemory> rehearse_gpt(const TrainOptions& o, int64_t characters, int world,
                                     std::shared_ptr<CallTable> calls) {
  TD_CHECK_VALUE(o.gpt.n_experts == 0, "plan: a mixture of experts routes tokens by their values, ",
                 "which a rehearsal on the meta device does not have; --n-experts is not planned");
  TD_CHECK_VALUE(o.amp == "none", "plan: --amp ", o.amp,
                 " is not rehearsed yet (autocast does not ",
                 "run on the meta device, so the prediction would be float32's)");
  TD_CHECK_VALUE(o.data_parallel.empty() && o.pipeline.empty(),
                 "plan: --data-parallel and --pipeline (one process over several devices) are ",
                 "not rehearsed; plan the ranks of --ddp, --tp, --pp or --cp instead");
  TD_CHECK_VALUE(world >= 1, "plan: ", world, " ranks");
  if (world == 1) return {rehearse_rank(o, characters, nullptr, calls)};
  std::vector<RankMemory> out(static_cast<size_t>(world));
  std::mutex mu;
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        // Meta collectives move nothing and allocate nothing; host ones meet the peers.
        RankMemory m = rehearse_rank(
            o, characters, std::make_shared<parallel::RehearsalCommunicator>(group), calls);
        const std::lock_guard<std::mutex> lock(mu);
        out[size_t(m.rank)] = std::move(m);
      },
      world);
  return out;
}

}  // namespace tandem::tools
