// parallel/whole_state.h — the whole model's state from any layout, and back: every tensor whole,
// under one device's names, and the optimizer state under one device's indices, as nanoGPT's and
// PyTorch's state dicts hold them (what a whole-file checkpoint saves; a one-device run, or
// PyTorch, loads it). One family for every layout the placement table records — DDP, ZeRO-1/2's
// pieces, fully_shard's rows, tensor-parallel slices, pipeline stages, and their stacks — in
// place of one per mode: each rank gives its parts (held_parts.h, what a sharded checkpoint
// writes), rank 0 receives them and puts each tensor together; loading, each rank takes the
// elements of what it holds from the whole tensors.
//
//   nn::StateDict sd = parallel::full_state_dict(table, model, world);          // on rank 0
//   optim::OptimizerState st = parallel::full_optimizer_state(table, model, opt, world);
//   ...
//   parallel::load_full_state_dict(table, model, sd, world, "model.safetensors");   // every rank
//   parallel::load_full_optimizer_state(table, model, opt, st, world);
//
// `model` is this rank's module (a pipeline's stage, a fully sharded model whose fields hold the
// shards): its state_dict's names (a tied weight's every name), its buffers, and its parameters'
// order. `optimizer` is over the table's tensors (under ZeRO its inner one). `world` is every rank
// of the run (null: this process alone). All four are collective over it.
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/placement.h>
#include <string_view>

namespace tandem::parallel {

/// One device's state_dict of the whole model on rank 0 of `world` (empty on the others), on the
/// CPU: each tensor put together from the ranks that hold its parts; a tied weight under each
/// of its names; buffers from the ranks at coordinate 0.
nn::StateDict full_state_dict(const PlacementTable& table, nn::Module& model, Communicator* world);

/// One device's optimizer state on rank 0 of `world` (empty on the others), on the CPU: each
/// parameter's state put together as the parameter is, under one device's indices
/// (optimizer_numbering.h).
optim::OptimizerState full_optimizer_state(const PlacementTable& table, nn::Module& model,
                                           const optim::Optimizer& optimizer, Communicator* world);

/// The inverse of full_state_dict, from a whole state dict of any layout (a one-device run's,
/// PyTorch's): each rank copies into what it holds its elements of each whole tensor. When it
/// does not fit — a tensor missing or of another shape, or one no rank's model has (a checkpoint
/// of another model) — nothing is loaded, and every rank throws one DataError naming `source`
/// and every problem. ZeRO's table lists only this rank's pieces: all-gather the parameters
/// afterwards (ZeroShards::gather_parameters).
void load_full_state_dict(const PlacementTable& table, nn::Module& model,
                          const nn::StateDict& whole, Communicator* world,
                          std::string_view source = "");

/// The inverse of full_optimizer_state: each rank loads its parameters' state, cut as they are.
/// DataError on every rank when the state lacks a parameter or has other groups.
void load_full_optimizer_state(const PlacementTable& table, nn::Module& model,
                               optim::Optimizer& optimizer, const optim::OptimizerState& whole,
                               Communicator* world);

/// Every tensor's whole gradient on rank 0 of `world` (empty on the others), on the CPU, under one
/// device's names in name order: what one device's `.grad` would hold, from any layout (zeros
/// where a tensor has none). To compare a layout's step with one device's, or two steps' drift.
nn::StateDict full_gradients(const PlacementTable& table, Communicator* world);

/// Rank 0's `state` on every rank of `world`, on the CPU (the others' argument is ignored): a
/// whole state every rank holds, as PyTorch's full state dict without rank0_only. Collective;
/// the tensors travel on `device` (the communicator's: CUDA for NCCL).
nn::StateDict broadcast_state_dict(const nn::StateDict& state, Communicator* world,
                                   Device device = Device::cpu());
optim::OptimizerState broadcast_optimizer_state(const optim::OptimizerState& state,
                                                Communicator* world, Device device = Device::cpu());

}  // namespace tandem::parallel
