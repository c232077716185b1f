// parallel/pipeline/pipeline_state.h — checkpoints of a model cut into pipeline stages (and, in
// each stage, into tensor-parallel slices): one device's names, tensors and optimizer indices,
// so a checkpoint resumes on any number of stages and slices, one process included.
//
//   auto sd = parallel::full_state_dict(pipe, tp);              // whole, on the group's rank 0
//   auto st = parallel::full_optimizer_state(pipe, opt, tp);
//   if (pipe.group()->rank() == 0) save(sd, st);
//   ...
//   parallel::load_full_state_dict(pipe, sd, tp);               // every rank: its stage's part
//   parallel::load_full_optimizer_state(pipe, opt, st, tp);
//
// The stages' tensors go to stage 0 with send and recv (tensor_message.h), not to every rank:
// no rank but that one ever holds the whole model. One device's optimizer numbers its parameters
// group by group, and within a group in the model's order, which is the stages' order; each
// stage's optimizer must be made by the same per-parameter rule (optim::adamw_groups' decay by
// dimension, say), with every group even where the stage has none of its parameters
// (adamw_groups' keep_empty_groups), for the numbers to agree. A tied weight's copies share its
// first stage's index. `tp` is the stage's tensor-parallel group, or null without tensor
// parallelism.
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <string_view>

namespace tandem::parallel {

/// One device's state dict of the whole model, on rank 0 of the pipeline's group (empty on the
/// others). Collective over the pipeline's group and `tp`.
nn::StateDict full_state_dict(DistributedPipeline& pipe, const std::shared_ptr<Communicator>& tp);

/// One device's optimizer state for the whole model, on rank 0 of the pipeline's group (empty on
/// the others). Collective over the pipeline's group and `tp`.
optim::OptimizerState full_optimizer_state(DistributedPipeline& pipe, optim::Optimizer& optimizer,
                                           const std::shared_ptr<Communicator>& tp);

/// The same from an optimizer that numbers its state by `params` (in index order) rather than by
/// its parameters(): a ZeRO optimizer's module_parameters() and consolidated state. Collective
/// as above.
optim::OptimizerState full_optimizer_state(DistributedPipeline& pipe,
                                           const std::vector<Tensor>& params,
                                           const optim::OptimizerState& state,
                                           const std::shared_ptr<Communicator>& tp);

/// Each rank loads its stage's part (its slices, with `tp`) of one device's state dict; missing
/// tensors are a DataError naming `source`. Collective over `tp`.
void load_full_state_dict(DistributedPipeline& pipe, const nn::StateDict& whole,
                          const std::shared_ptr<Communicator>& tp, std::string_view source = "");

/// Each rank loads its stage's part of one device's optimizer state. Collective over the
/// pipeline's group (and its tied-weight groups) and `tp`.
void load_full_optimizer_state(DistributedPipeline& pipe, optim::Optimizer& optimizer,
                               const optim::OptimizerState& whole,
                               const std::shared_ptr<Communicator>& tp);
/// This stage's part of one device's optimizer state, indexed by `params` with groups as
/// `groups_json` says (a ZeRO optimizer's module_parameters() and param_groups_json()): what its
/// load_state_dict takes. Collective as above.
optim::OptimizerState stage_optimizer_state(DistributedPipeline& pipe,
                                            const std::vector<Tensor>& params,
                                            const std::string& groups_json,
                                            const optim::OptimizerState& whole,
                                            const std::shared_ptr<Communicator>& tp);

}  // namespace tandem::parallel
