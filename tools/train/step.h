// tools/train/step.h — one training step and one evaluation forward, for every way a run can use
// its devices. The mode is resolved once (config.h's Placement); make_setup() places the model and
// wraps it once; train_step() then has one short case per mode, as llm.c's step names its
// reduction (gpt2_backward_and_reduce) and torch's pipeline schedule.step(x, target=y) returns the
// unscaled loss:
//   None, DDP, DataParallel: forward through the model or its wrapper, cross-entropy, backward
//                            (DDP all-reduces the gradients inside backward);
//   Pipeline:                Pipeline::step does forward and backward micro-batch by micro-batch.
// --tp is a DDP run whose model is the GPT cut by parallel::tp's plan over the mesh's "tp"
// groups (DDP, if any, over its "dp" groups): the same cases, with the tensor-parallel loss, clip
// and checkpoint. --pp cuts that model again into one stage per rank of the mesh's "pp" groups
// (parallel::DistributedPipeline): its step() is the forward and backward, run inside DDP's
// no_sync() (DDP over the stage and the "dp" group, with --zero 1|2 too), whose reduction then
// runs once (DistributedDataParallel::reduce_gradients).
// Autocast covers the forward and the loss; under --amp fp16 backward starts from the loss times
// the gradient scaler's scale, and the loss returned is unscaled in every mode.
#pragma once

#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/nn/nn.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/tp/regions.h>
#include <functional>
#include <memory>

#include "../commands.h"
#include "checkpointing.h"
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
  // --pp: this rank's stage of the pipeline over the mesh's "pp" group; `model` is then the
  // stage's modules (the rest of the whole model was dropped), and holds the pipeline alive.
  std::shared_ptr<parallel::DistributedPipeline> stages;
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

/// --tp/--pp: the ranks of `world` as a (dp, tp) mesh, or (dp, pp, tp) with --pp; ValueError when
/// they do not match the world's size, or the global batch does not split over dp.
std::shared_ptr<parallel::DeviceMesh> make_mesh(std::shared_ptr<parallel::Communicator> world,
                                                const TrainOptions& options);

/// --amp fp16's gradient scaler (off for float32 and bfloat16). Under DDP the ranks sum their
/// found-inf flags through `group`, so that all skip a step together.
std::unique_ptr<optim::GradScaler> make_grad_scaler(DType amp, parallel::Communicator* group,
                                                    Device device);

/// Places `model` (on the run's device, or cut into one stage per device by parallel::split) and
/// wraps it for `placement.mode`. Make the optimizer afterwards: it holds the placed parameters.
/// --ddp needs the process group initialised; --tp the mesh, and `model` cut already, with its
/// cuts recorded in `placements` (which the wrappers then add to; null: a new table).
Setup make_setup(std::shared_ptr<nn::Sequential> model, const Placement& placement,
                 const TrainOptions& options, std::shared_ptr<parallel::DeviceMesh> mesh = nullptr,
                 std::shared_ptr<parallel::PlacementTable> placements = nullptr);

/// ", DDP over 2 ranks (gloo), autocast bf16": how the run uses its devices, for its first line.
std::string describe_parallelism(Setup& setup, const TrainOptions& options,
                                 const parallel::Communicator* group);

struct StepResult {
  Tensor loss;    // the batch's mean loss, unscaled, detached
  Tensor logits;  // [N, classes], on the device that computed them
};
/// Forward, loss and backward of one batch: gradients accumulate into the model's .grad.
StepResult train_step(Setup& s, const Tensor& x, const Tensor& y);

/// --ddp: this rank's state as the formulas predict it (parallel/ddp/state_bytes.h: parameters,
/// gradients, optimizer state for --zero's stage) and the bytes its device holds now, e.g.
/// "6.5 MB predicted (parameters 1.9 + gradients 0.9 + optimizer 3.7), 6.8 MB held".
std::string memory_line(const Setup& s, const TrainOptions& options, int world);

/// What --checkpoint saves: the model's and optimizer's whole state, one device's, put together
/// from every rank's parts as the placement table records them (parallel/whole_state.h).
/// Collective in a run of ranks (every rank calls it; rank 0 holds the result and saves it).
CheckpointContent checkpoint_content(Setup& s, optim::Optimizer& optimizer);
/// How --resume puts a checkpoint back, whole or sharded, of any layout: each rank takes the
/// elements of what it trains. Collective in a run of ranks.
Restore restore_into(Setup& s, optim::Optimizer& optimizer);

/// What --sharded-checkpoint saves of this rank: its placement table's tensors, the model's
/// buffers, and the optimizer over the table's tensors (under ZeRO-1/2 its inner optimizer).
ShardedContent sharded_content(Setup& s, optim::Optimizer& optimizer,
                               parallel::Communicator& world);

/// Whether every rank evaluates: under --zero 3 and --tp the forward's collectives need every
/// rank, so the ranks evaluate together (rank 0 reports); otherwise rank 0 alone.
inline bool everyone_evaluates(const Setup& s) { return s.fsdp != nullptr || s.tp != nullptr; }

/// Clips the gradients' global norm to max_norm, one device's norm whatever the layout
/// (parallel::clip_grad_norm_ over the placement table); returns the norm before clipping.
double clip_gradients(Setup& s, double max_norm);

/// The model's logits for x without recording a graph, through the same path as training (a DDP
/// rank evaluates alone, on its own model: no collective; under --zero 3 through the sharded
/// model, collectively).
Tensor predict(Setup& s, const Tensor& x);

/// The loss of the model's output for x against y, without a graph (evaluation). Under --pp
/// every rank calls it: the last stage computes it and every stage returns it.
double eval_loss(Setup& s, const Tensor& x, const Tensor& y);

}  // namespace tandem::tools
