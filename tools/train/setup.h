// tools/train/setup.h — a run's model as its mode places it: the one model, the wrappers applied
// to it once, the mesh and groups it runs over, and the placement table they all wrote. The
// mode is resolved once (config.h's Placement); make_setup() places and wraps; the step
// (step.h) and checkpoints (setup_state.h) then read what it built.
#pragma once

#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/nn/nn.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <tandem/parallel/cp/plan.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/ep/plan.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/tp/regions.h>
#include <functional>
#include <memory>

#include "../commands.h"
#include "config.h"

namespace tandem::tools {

struct Setup {
  Parallelism mode = Parallelism::None;
  std::shared_ptr<nn::Sequential> model;  // the one model, whatever the mode
  Device device;                          // where batches go
  DType amp = kFloat32;                   // --amp: autocast's dtype (float32: off)
  optim::GradScaler* scaler = nullptr;    // --amp fp16; may be off
  std::unique_ptr<parallel::DistributedDataParallel<nn::Sequential>> ddp;
  // --ddp --zero 3: the model fully sharded in place (`model`'s fields hold this rank's shards
  // between steps), instead of `ddp`.
  std::unique_ptr<parallel::FullyShardedModule> fsdp;
  std::unique_ptr<parallel::DataParallel> dp;
  std::unique_ptr<parallel::Pipeline> pipe;
  parallel::ZeroOptimizer* zero = nullptr;  // --zero: the run's optimizer (optim_setup.h)
  // --tp: the dp × tp mesh of the run's ranks and this rank's tensor-parallel group (`model` is
  // then this rank's slices; `ddp` is over the mesh's "dp" group, null when dp = 1).
  std::shared_ptr<parallel::DeviceMesh> mesh;
  parallel::tp::Group tp;
  bool sequence_parallel = false;
  // --cp: this rank's context-parallel group (the mesh's "cp"; `model` attends across it) and
  // how a sequence's positions split over it: train_step and eval_loss give the model this
  // rank's positions. Data parallelism then runs over dp × cp together ("dp_cp").
  std::shared_ptr<parallel::Communicator> cp;
  parallel::cp::SequenceSplit cp_split = parallel::cp::SequenceSplit::ZigZag;
  // --pp: this rank's stage of the pipeline over the mesh's "pp" group; `model` is then the
  // stage's modules (the rest of the whole model was dropped), and holds the pipeline alive.
  std::shared_ptr<parallel::DistributedPipeline> stages;
  // The last training step's pipeline actions as they ran: --pp this rank's alone (one row,
  // gathered by pipeline_report.h), --pipeline every rank's.
  std::vector<std::vector<parallel::TimedAction>> step_timelines;
  // --n-experts: the MoE layers' auxiliary losses join the training loss. --ep: each rank holds
  // its experts; after data parallelism over dp, the gradients are reduced over ep.
  bool moe = false, expert_parallel = false;
  // What this rank trains and how each tensor lies in the whole model, as every wrapper above
  // recorded it (parallel/placement.h): what the gradient norm and the partial-gradient
  // reduction read, whatever the mode.
  std::shared_ptr<parallel::PlacementTable> placements;
  // The loss of a batch's output against its targets: cross_entropy for the classifiers,
  // nn::gpt_loss (over every position) for the GPT.
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss =
      [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); };
};

/// --ddp: joins the process group from `tandem launch`'s environment (a CUDA run takes the
/// device LOCAL_RANK names) and checks that the global batch splits over the ranks (for --tp,
/// make_mesh checks it against the data-parallel ranks).
std::shared_ptr<parallel::Communicator> join_ddp_group(Placement& placement,
                                                       const TrainOptions& options);

/// --tp/--pp/--cp: the ranks of `world` as a (dp, tp) mesh, (dp, pp, tp) with --pp, and a "cp"
/// dimension before "tp" with --cp; ValueError when they do not match the world's size, or the
/// global batch does not split over dp.
std::shared_ptr<parallel::DeviceMesh> make_mesh(std::shared_ptr<parallel::Communicator> world,
                                                const TrainOptions& options);

/// --amp fp16's gradient scaler (off for float32 and bfloat16). Under DDP the ranks sum their
/// found-inf flags through `group`, so that all skip a step together.
std::unique_ptr<optim::GradScaler> make_grad_scaler(DType amp, parallel::Communicator* group,
                                                    Device device);

/// Places `model` (on the run's device, or cut into one stage per device by parallel::split) and
/// wraps it for `placement.mode`. Make the optimizer afterwards: it holds the placed parameters.
/// --ddp needs the process group initialised (or the ranks as `world`: a rehearsal's threads);
/// --tp the mesh, and `model` cut already, with its cuts recorded in `placements` (which the
/// wrappers then add to; null: a new table).
Setup make_setup(std::shared_ptr<nn::Sequential> model, const Placement& placement,
                 const TrainOptions& options, std::shared_ptr<parallel::DeviceMesh> mesh = nullptr,
                 std::shared_ptr<parallel::PlacementTable> placements = nullptr,
                 std::shared_ptr<parallel::Communicator> world = nullptr);

/// ", DDP over 2 ranks (gloo), autocast bf16": how the run uses its devices, for its first line.
std::string describe_parallelism(Setup& setup, const TrainOptions& options,
                                 const parallel::Communicator* group);

/// --ddp: this rank's state as the formulas predict it (parallel/ddp/state_bytes.h: parameters,
/// gradients, optimizer state for --zero's stage) and the bytes its device holds now, e.g.
/// "6.5 MB predicted (parameters 1.9 + gradients 0.9 + optimizer 3.7), 6.8 MB held".
std::string memory_line(const Setup& s, const TrainOptions& options, int world);

}  // namespace tandem::tools
