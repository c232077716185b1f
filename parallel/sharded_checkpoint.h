// parallel/sharded_checkpoint.h — checkpoints that every rank writes at once, each only the
// elements it holds, for any layout the placement table records (DDP, ZeRO-1/2's pieces,
// fully_shard's rows, tensor-parallel slices, pipeline stages, and their stacks), and that load
// under any other (PyTorch's distributed checkpoint; DeepSpeed's universal checkpoint without its
// conversion step). No rank gathers the whole model to save it. Loading is simpler than it could
// be: a rank opens every file that holds a part of a tensor it needs (in practice all of them)
// and keeps them until the load ends, and maps elements through whole-size index tables, so a
// load holds about the checkpoint's bytes plus 32 bytes per element of its largest tensor.
//
//   DIR/step-<S>/rank-<r>-of-<N>.safetensors  rank r's tensors: "model.<name>" for what it
//                                             trains and its buffers, "optim.<name>.<state>"
//                                             for their optimizer state (one device's names)
//   DIR/step-<S>/index.json                   per tensor: the whole shape, the dtype, and for
//                                             each file that holds a part, the placements that
//                                             cut it (placed_elements.h); the optimizer's
//                                             param groups; the caller's metadata
//   DIR/latest                                "step-<S>", replaced (atomically, as every file
//                                             here) once all of step S's files are complete
//
// A tensor replicated along a dimension is written by the rank at coordinate 0 there only; a
// tied weight's second copy (a pipeline's last stage) not at all. Loading reads, for each
// tensor this rank holds, the files whose parts hold its elements, and puts its elements
// together: written by 2 × 2 (dp × tp, ZeRO-1), read on a pipeline of 4, or on one process.
// A crash mid-save leaves `latest` naming the previous complete step.
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/placement.h>
#include <map>
#include <string>
#include <vector>

namespace tandem::parallel {

/// Writes step `step` of what this rank trains — `table`'s tensors, each as its placements cut
/// it — with the model's `buffers` (replicated: written by the ranks at coordinate 0) and the
/// state of `optimizer` (null: none), an optimizer over the table's tensors (under ZeRO its
/// inner optimizer, over the pieces), under `dir`, with rank 0's `metadata` in the index.
/// Collective over `world` (every rank of the run). A rank that cannot write its file makes
/// every rank throw a DataError naming it, and `latest` is left as it was.
void save_sharded_checkpoint(const std::string& dir, int64_t step, Communicator& world,
                             const PlacementTable& table, const nn::StateDict& buffers,
                             const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata = {});

/// Loads the step `dir/latest` names into `table`'s tensors (in place), `buffers` and
/// `optimizer`, under any layout: each tensor's elements from whichever files hold them. Not
/// collective. ZeRO's table lists only this rank's pieces: all-gather the parameters afterwards
/// (ZeroShards::gather_parameters). Returns the step, and the saved metadata in `*metadata`.
/// DataError naming the file for a missing or inconsistent checkpoint (a tensor absent, of
/// another shape, or elements no file holds).
int64_t load_sharded_checkpoint(const std::string& dir, const PlacementTable& table,
                                const nn::StateDict& buffers, optim::Optimizer* optimizer,
                                std::map<std::string, std::string>* metadata = nullptr);

/// One process, no group: the model's tensors of the step `dir/latest` names, each whole, under
/// the model's names, as a whole-file checkpoint holds them (`tandem generate` reads a sharded
/// run this way). DataError naming the file for a missing or inconsistent checkpoint.
nn::StateDict load_sharded_model_state(const std::string& dir);

/// The metadata of the step `dir/latest` names, read from its index alone (no shard is opened).
std::map<std::string, std::string> sharded_checkpoint_metadata(const std::string& dir);

/// The whole shape of the model's tensor `name` (one device's name) in the step `dir/latest`
/// names, from its index alone. DataError naming the index when it holds no such tensor.
Shape sharded_checkpoint_shape(const std::string& dir, const std::string& name);

/// Whether `dir` holds a sharded checkpoint (its `latest`), rather than nothing or other files.
bool is_sharded_checkpoint(const std::string& dir);

/// The step directories under `dir` that `latest` does not name (left by earlier saves);
/// a trainer that keeps one checkpoint removes them after each save.
std::vector<std::string> superseded_steps(const std::string& dir);

}  // namespace tandem::parallel
