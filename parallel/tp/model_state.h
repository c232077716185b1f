// parallel/tp/model_state.h — a tensor-parallel model as a whole: its parameters and optimizer
// state put back together (to save, to compare with one device) or loaded back slice by slice (to
// resume, at any tensor-parallel size), and its gradient's global norm (to clip as one device
// clips). Each finds the sliced tensors by walking the model for ColumnParallelLinear,
// RowParallelLinear and VocabParallelEmbedding; every other parameter is the same on every rank.
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
/// The inverses: this rank's slice of each whole entry (no communication), to load into the
/// model (or fully_shard's load_full_state_dict) and the optimizer.
nn::StateDict slices_of(nn::Module& model, const nn::StateDict& whole, const Group& group);
optim::OptimizerState slices_of(nn::Module& model, const optim::Optimizer& optimizer,
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

/// Scales every gradient of `model` so that the whole model's gradient has L2 norm at most
/// max_norm; returns the norm before clipping. The slices' squares are summed over the group
/// (one all-reduce of one number), the replicated tensors' counted once. Every rank calls it.
/// When fully_shard shards `model` over a data-parallel group, pass it as `shards`: each rank then
/// holds 1/W of every tensor, and both sums are first summed over it. When `model` is one stage
/// of a pipeline (DistributedPipeline::stage()), pass the pipeline's group as `stages`: the sums
/// are summed over the stages too, less `counted_elsewhere` (a tied weight's copies on the stages
/// that do not count it: those DistributedPipeline::parameters_once() leaves out).
double clip_grad_norm_(nn::Module& model, double max_norm, const Group& group,
                       Communicator* shards = nullptr, Communicator* stages = nullptr,
                       const std::vector<Tensor>& counted_elsewhere = {});

/// With sequence parallelism each rank's replicated parameters (LayerNorms, wpe, the row layers'
/// biases) saw only its positions, so their gradients are partial: sums them over the group (one
/// all-reduce of all of them), after backward and before clipping and the step. Every rank
/// calls it (Megatron's allreduce of sequence-parallel gradients).
void reduce_sequence_parallel_gradients(nn::Module& model, const Group& group);

}  // namespace tandem::parallel::tp
