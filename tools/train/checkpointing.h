// tools/train/checkpointing.h — `tandem train --checkpoint DIR [--resume]`. After every epoch DIR
// gets model.safetensors and optimizer.safetensors (each written atomically), both carrying the
// same metadata: the epochs completed, the global step, the training device's generator state
// (for dropout) and the run's configuration as JSON; a GPT's also its vocabulary, and its "epoch"
// counts iterations. Restoring all of it — with the DataLoader's
// order and the augmentation a function of (seed, epoch) — makes a resumed run bit-identical to
// an uninterrupted one. With --sharded-checkpoint, DIR instead holds what
// parallel::save_sharded_checkpoint writes (each rank its part, under any layout), the same
// metadata in its index.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/module.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/placement.h>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace tandem::tools {

struct TrainState {
  int64_t epoch = 0;             // epochs completed
  int64_t global_step = 0;       // optimizer steps taken
  GeneratorState generator;      // of the training device, after `epoch` epochs
  std::string config_json;       // the run's resolved flags (train/config.h)
  std::string grad_scaler_json;  // --amp fp16: the gradient scaler's state (optimizer file only)
  std::string vocabulary;        // --model gpt: the tokenizer's characters, in id order (UTF-8)
  // --tp: the offset of the ranks' own dropout streams (parallel/tp/gpt.h's Plan), equal on all
  std::optional<uint64_t> tp_rank_stream_offset;
};

/// The model's and optimizer's state as a checkpoint holds them: whole tensors under the model's
/// names (step.h's checkpoint_content gathers them when ranks hold shards).
struct CheckpointContent {
  nn::StateDict model;
  optim::OptimizerState optimizer;
};

/// Writes DIR/model.safetensors and DIR/optimizer.safetensors, creating DIR if needed.
void save_checkpoint(const std::string& dir, const CheckpointContent& content,
                     const TrainState& state);

/// What one rank of a --sharded-checkpoint run saves: the tensors it trains (the placement
/// table), its model's buffers, and its optimizer over the table's tensors (ZeRO's inner one).
struct ShardedContent {
  parallel::Communicator* world = nullptr;  // every rank of the run
  const parallel::PlacementTable* table = nullptr;
  nn::StateDict buffers;
  const optim::Optimizer* optimizer = nullptr;
};

/// Every rank: writes its part (parallel/sharded_checkpoint.h) under DIR, with `state` in the
/// index, and removes the step it replaces. NonFiniteError on every rank if a tensor of any rank
/// holds NaN or inf.
void save_sharded_checkpoint(const std::string& dir, const ShardedContent& content,
                             const TrainState& state);

/// How a run takes a checkpoint's content back: model(state dict, file path), optimizer(state);
/// a run of ranks also `sharded`, which loads DIR's sharded checkpoint (of any layout) into this
/// rank's part and returns its metadata.
struct Restore {
  std::function<void(const nn::StateDict&, const std::string& path)> model;
  std::function<void(const optim::OptimizerState&)> optimizer;
  std::function<std::map<std::string, std::string>(const std::string& dir)> sharded;
};

/// Before any training: DIR can be created and written, else a DataError naming it and why (a
/// path through a file, /proc/nope, a read-only directory), rather than at the first save after
/// an epoch of work.
void check_checkpoint_writable(const std::string& dir);

/// Whether DIR holds a checkpoint to resume from, of either kind: a whole-file pair (or one whose
/// save stopped between its two renames) or a sharded checkpoint's `latest`. A restart by
/// `tandem launch --max-restarts` resumes when it does.
bool holds_checkpoint(const std::string& dir);

/// Whether the checkpoint a resume of DIR reads is the sharded one: DIR holds one, and no newer
/// whole-file pair (both are there only when a save that switched kinds stopped before removing
/// the other; the one with more steps is the newer).
bool resumes_sharded(const std::string& dir);

/// Loads both files of DIR through `restore` (or, where DIR is sharded, its shards) and returns the
/// saved state. DataError naming the directory when a file is missing, when the metadata is
/// incomplete, when the two files come from different epochs (a crash between the two writes), or
/// when DIR is sharded and this run is not a run of ranks.
TrainState load_checkpoint(const std::string& dir, const Restore& restore);

}  // namespace tandem::tools
