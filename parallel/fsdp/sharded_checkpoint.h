// parallel/fsdp/sharded_checkpoint.h — a fully sharded model's sharded checkpoint: the general one
// (parallel/sharded_checkpoint.h) over the table fully_shard records its rows in, with the model's
// buffers and group. Each rank writes only its rows; a checkpoint written by N ranks loads on M,
// or under any other layout (TP × fully_shard, ZeRO-1/2, a pipeline, one process).
//
//   parallel::save_sharded_checkpoint(dir, step, fsdp, &opt, {{"epoch", "3"}});
//   parallel::load_sharded_checkpoint(dir, fsdp, &opt);   // on any number of ranks
//
// `tandem train --sharded-checkpoint` saves this way; for one file that PyTorch loads, save
// full_state_dict() with nn::save_model instead (what `tandem train --zero 3` does without it).
#pragma once

#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <map>
#include <string>

namespace tandem::parallel {

/// Writes step `step` of `model` (and `optimizer`, an optimizer over model.parameters(), if not
/// null) under `dir`, with rank 0's `metadata` in the index. Collective over the model's group.
void save_sharded_checkpoint(const std::string& dir, int64_t step, FullyShardedModule& model,
                             const optim::Optimizer* optimizer = nullptr,
                             const std::map<std::string, std::string>& metadata = {});

/// Loads the step `dir/latest` names into `model` (and `optimizer`): each rank reads the rows its
/// shards need. Returns the step, and the saved metadata in `*metadata` if not null.
int64_t load_sharded_checkpoint(const std::string& dir, FullyShardedModule& model,
                                optim::Optimizer* optimizer = nullptr,
                                std::map<std::string, std::string>* metadata = nullptr);

}  // namespace tandem::parallel
