// parallel/tp/model_state.h — a tensor-parallel model as a whole: its parameters and optimizer
// state put back together (to save, to compare with one device) or loaded back slice by slice (to
// resume, at any tensor-parallel size). (Its gradient norm is parallel::clip_grad_norm_'s, over
// the plan's placement table.) Each finds the sliced tensors by walking the model for
// ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding; every other parameter is the
// same on every rank.
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/tp/layers.h>

namespace tandem::parallel::tp {

/// Every parameter of `model` whole, under its name in `model` (for a model cut from one device's,
/// that model's name), copied to the CPU: each layer's slices are all-gathered from the group and
/// put back in place; the replicated tensors are copied. Every rank of the group calls it.
nn::StateDict full_parameters(nn::Module& model, const Group& group);

/// Every entry of model.state_dict() whole (parameters, buffers, and a tied weight under each of
/// its names, as one device's state_dict has them): what a checkpoint saves. Every rank calls it.
nn::StateDict full_state_dict(nn::Module& model, const Group& group);

/// The optimizer's state (over `model`'s parameters) with each sliced parameter's state tensors
/// (Adam's moments, shaped like the parameter) put back together as full_parameters does, on the
/// CPU: what a checkpoint saves, whatever the tensor-parallel size. Every rank calls it.
optim::OptimizerState full_optimizer_state(nn::Module& model, const optim::Optimizer& optimizer,
                                           const Group& group);

/// The same two from given slices: entries under `model`'s names (keys of an optimizer over its
/// parameters), each this rank's slice, such as a fully sharded model's (fully_shard over the
/// data-parallel group, `model` its module) full_state_dict() and full_optimizer_state_dict().
nn::StateDict put_slices_together(nn::Module& model, const nn::StateDict& slices,
                                  const Group& group);
optim::OptimizerState put_slices_together(nn::Module& model, const optim::Optimizer& optimizer,
                                          optim::OptimizerState slices, const Group& group);
/// The same, the state's indices naming `params` (ZeroOptimizer::module_parameters(): a ZeRO
/// optimizer's consolidated state is indexed by the module's parameters, not its pieces).
optim::OptimizerState put_slices_together(nn::Module& model, const std::vector<Tensor>& params,
                                          optim::OptimizerState slices, const Group& group);
/// The inverses: this rank's slice of each whole entry (no communication), to load into the
/// model (or fully_shard's load_full_state_dict) and the optimizer.
nn::StateDict slices_of(nn::Module& model, const nn::StateDict& whole, const Group& group);
optim::OptimizerState slices_of(nn::Module& model, const optim::Optimizer& optimizer,
                                const optim::OptimizerState& whole, const Group& group);
optim::OptimizerState slices_of(nn::Module& model, const std::vector<Tensor>& params,
                                const optim::OptimizerState& whole, const Group& group);

/// The inverse of full_state_dict: loads whole tensors (a checkpoint of one device or of any
/// tensor-parallel size) into `model`, each rank taking its slices. `source` names the file in
/// errors. Needs no communication.
void load_full_state_dict(nn::Module& model, const nn::StateDict& whole, const Group& group,
                          std::string_view source = "");
/// The inverse of full_optimizer_state: each rank loads its slices of the whole state (no
/// communication).
void load_full_optimizer_state(nn::Module& model, optim::Optimizer& optimizer,
                               const optim::OptimizerState& whole, const Group& group);

}  // namespace tandem::parallel::tp
