// parallel/fsdp/sharded_checkpoint.h — checkpoints of a fully sharded model that every rank writes
// at once, each only its own shards (PyTorch's distributed checkpoint; DeepSpeed's per-rank
// files): no rank ever holds the whole model, and a checkpoint written by N ranks loads on M.
//
//   DIR/step-<S>/rank-<r>-of-<N>.safetensors  rank r's rows of every parameter ("model.<name>")
//                                             and of each per-element optimizer state
//                                             ("optim.<name>.<state>"); rank 0's also the buffers
//                                             and the scalar states (Adam's step)
//   DIR/step-<S>/index.json                   per tensor: the whole shape, the dtype, and which
//                                             rows each file holds; the optimizer's param groups
//   DIR/latest                                "step-<S>", replaced (atomically, as every file
//                                             here) once all of step S's files are complete
// A crash mid-save leaves `latest` naming the previous complete step. `tandem train --zero 3
// --sharded-checkpoint` saves this way; for one file that PyTorch loads, save full_state_dict()
// with nn::save_model instead (what `tandem train --zero 3` does without the flag).
#pragma once

#include <tandem/parallel/fsdp/fully_shard.h>
#include <map>
#include <string>
#include <vector>

namespace tandem::parallel {

/// Writes step `step` of `model` (and `optimizer`, an optimizer over model.parameters(), if not
/// null) under `dir`, with rank 0's `metadata` (a trainer's epoch, configuration, ...) in the
/// index. Collective. A rank that cannot write its file makes every rank throw a DataError naming
/// it, and `latest` is left as it was.
void save_sharded_checkpoint(const std::string& dir, int64_t step, FullyShardedModule& model,
                             const optim::Optimizer* optimizer = nullptr,
                             const std::map<std::string, std::string>& metadata = {});

/// Loads the step `dir/latest` names into `model` (and `optimizer`), on any number of ranks: each
/// rank reads, from the files that hold them, the rows its shards need. Returns the step, and the
/// saved metadata in `*metadata` if not null. DataError naming the file for a missing or
/// inconsistent checkpoint (a tensor absent, of another shape, or rows no file holds).
int64_t load_sharded_checkpoint(const std::string& dir, FullyShardedModule& model,
                                optim::Optimizer* optimizer = nullptr,
                                std::map<std::string, std::string>* metadata = nullptr);

/// One process, no group: the model's tensors of the step `dir/latest` names, each whole, under
/// the model's names, as a whole-file checkpoint holds them (`tandem generate` reads a sharded
/// run this way). DataError naming the file for a missing or inconsistent checkpoint.
nn::StateDict load_sharded_model_state(const std::string& dir);

/// The metadata of the step `dir/latest` names, read from its index alone (no shard is opened).
std::map<std::string, std::string> sharded_checkpoint_metadata(const std::string& dir);

/// Whether `dir` holds a sharded checkpoint (its `latest`), rather than nothing or other files.
bool is_sharded_checkpoint(const std::string& dir);

/// The step directories under `dir` that `latest` does not name (left by earlier saves);
/// a trainer that keeps one checkpoint removes them after each save.
std::vector<std::string> superseded_steps(const std::string& dir);

}  // namespace tandem::parallel
