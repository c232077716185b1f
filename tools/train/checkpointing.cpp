// tools/train/checkpointing.cpp — the metadata around nn::save_model / nn::save_optimizer, and
// saving the two files as a pair. Each file is written atomically (temporary file, fsync,
// rename), but two renames are not one: so both are first written complete as *.next, then
// renamed into place. A crash before the renames leaves the previous pair as it was; one between
// them leaves the new model beside optimizer.safetensors.next of the same epoch, and
// load_checkpoint finishes that rename. Either way no finished epoch is lost.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/nn/serialize.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpointing.h"
#include "epoch.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kNext[] = ".next";  // a new pair, written in full before either is renamed

// A model whose parameters or buffers went NaN or inf must not replace a good checkpoint: batch
// norm's running statistics can diverge while the parameters stay finite (--skip-nonfinite skips
// the steps, not the forward that updated the statistics), and such a model evaluates to chance.
void check_finite(const nn::StateDict& model, const std::string& dir, int64_t epoch) {
  for (const auto& [name, t] : model) {
    if (!is_floating(t.dtype())) continue;  // counters (num_batches_tracked)
    const double s = abs(t.detach()).sum().to(kFloat64).item();
    TD_CHECK_AS(NonFiniteError, std::isfinite(s), "train: \"", name,
                "\" holds NaN or inf after epoch ", epoch, "; the checkpoint in ", dir,
                " was not overwritten (it still holds the last good epoch)");
  }
}

// The "epoch" a checkpoint file says it holds; empty when it has none or cannot be read.
std::string epoch_text(const std::string& path) {
  try {
    const auto meta = load_safetensors(path).metadata;
    const auto it = meta.find("epoch");
    return it == meta.end() ? "" : it->second;
  } catch (const Error&) {
    return "";
  }
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  TD_CHECK_AS(DataError, !ec, "train: cannot rename ", from.string(), " to ", to.string(), ": ",
              ec.message());
}

const std::string& field(const nn::Metadata& meta, const std::string& key,
                         const std::string& path) {
  const auto it = meta.find(key);
  TD_CHECK_AS(DataError, it != meta.end(), "train: ", path, " has no \"", key,
              "\" in its metadata; it was not written by `tandem train --checkpoint`");
  return it->second;
}

int64_t int_field(const nn::Metadata& meta, const std::string& key, const std::string& path) {
  const std::string& text = field(meta, key, path);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  TD_CHECK_AS(DataError, ec == std::errc() && end == text.data() + text.size() && value >= 0,
              "train: ", path, ": metadata \"", key, "\" is \"", text,
              "\", not a non-negative integer");
  return value;
}

nn::Metadata metadata_of(const TrainState& state) {
  nn::Metadata meta = {{"epoch", std::to_string(state.epoch)},
                       {"global_step", std::to_string(state.global_step)},
                       {"generator", nn::to_string(state.generator)},
                       {"config", state.config_json}};
  if (!state.vocabulary.empty()) meta["vocabulary"] = state.vocabulary;
  if (state.tp_rank_stream_offset)
    meta["tp_rank_stream_offset"] = std::to_string(*state.tp_rank_stream_offset);
  return meta;
}

// The state `meta` holds; `o` is the optimizer's metadata (the same but for the scaler's state).
TrainState state_of(const nn::Metadata& m, const nn::Metadata& o, const std::string& path) {
  TrainState state;
  state.epoch = int_field(m, "epoch", path);
  state.global_step = int_field(m, "global_step", path);
  state.generator = nn::generator_state_from_string(field(m, "generator", path), path);
  state.config_json = field(m, "config", path);
  if (auto it = o.find("grad_scaler"); it != o.end()) state.grad_scaler_json = it->second;
  if (auto it = m.find("vocabulary"); it != m.end()) state.vocabulary = it->second;
  if (m.count("tp_rank_stream_offset"))
    state.tp_rank_stream_offset = uint64_t(int_field(m, "tp_rank_stream_offset", path));
  return state;
}

// A whole-file pair's model file: in place, or complete beside it as *.next when the save
// stopped between its two renames (load_checkpoint finishes that rename).
bool holds_pair(const std::string& dir) {
  std::error_code ec;
  const fs::path model = fs::path(dir) / kModelFile;
  return fs::is_regular_file(model, ec) &&
         (fs::is_regular_file(fs::path(dir) / kOptimizerFile, ec) ||
          fs::is_regular_file(fs::path(dir) / (std::string(kOptimizerFile) + kNext), ec));
}

// The "global_step" of metadata; -1 when it has none.
int64_t global_step_of(const nn::Metadata& meta) {
  const auto it = meta.find("global_step");
  int64_t step = -1;
  if (it != meta.end())
    std::from_chars(it->second.data(), it->second.data() + it->second.size(), step);
  return step;
}

}  // namespace

void check_checkpoint_writable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TD_CHECK_AS(DataError, !ec && fs::is_directory(dir), "train: --checkpoint ", dir,
              ": cannot create the directory (", ec ? ec.message() : "a file is in the way", ")");
  // A directory can exist and still refuse files (read-only, or another user's): try one.
  const fs::path probe = fs::path(dir) / str(".write-test.", ::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "w");
  const int err = errno;
  TD_CHECK_AS(DataError, f != nullptr, "train: --checkpoint ", dir, ": cannot write there (",
              std::strerror(err), ")");
  std::fclose(f);
  fs::remove(probe, ec);
}

bool holds_checkpoint(const std::string& dir) {
  return holds_pair(dir) || parallel::is_sharded_checkpoint(dir);
}

bool resumes_sharded(const std::string& dir) {
  if (!parallel::is_sharded_checkpoint(dir)) return false;
  if (!holds_pair(dir)) return true;
  int64_t whole = -1;
  try {
    whole = global_step_of(load_safetensors((fs::path(dir) / kModelFile).string()).metadata);
  } catch (const Error&) {
    return true;  // an unreadable pair is no rival
  }
  return global_step_of(parallel::sharded_checkpoint_metadata(dir)) >= whole;
}

void save_sharded_checkpoint(const std::string& dir, const ShardedContent& c,
                             const TrainState& state) {
  // As check_finite, over each rank's part: every rank learns of a NaN on any rank, so all stop.
  const std::vector<Tensor> mine = c.table->tensors();
  Tensor sum =
      zeros({1}, {.dtype = kFloat64, .device = mine.empty() ? Device::cpu() : mine[0].device()});
  for (const Tensor& t : mine)
    if (t.numel() > 0 && is_floating(t.dtype()))
      sum.add_(abs(t.detach()).sum().to(kFloat64).reshape({1}));
  c.world->all_reduce(sum)->wait();
  TD_CHECK_AS(NonFiniteError, std::isfinite(sum.to(Device::cpu()).item()),
              "train: the parameters hold NaN or inf after epoch ", state.epoch,
              "; the checkpoint in ", dir,
              " was not overwritten (it still holds the last good one)");
  nn::Metadata meta = metadata_of(state);
  if (!state.grad_scaler_json.empty()) meta["grad_scaler"] = state.grad_scaler_json;
  parallel::save_sharded_checkpoint(dir, state.global_step, *c.world, *c.table, c.buffers,
                                    c.optimizer, meta);
  if (c.world->rank() != 0) return;
  // What this save replaces: earlier steps, and a whole-file pair (a run resumed with the flag
  // added), which load_checkpoint would otherwise never read again. Removing a leftover late costs
  // disk, not correctness: `latest` is committed.
  std::error_code ec;
  for (const std::string& old : parallel::superseded_steps(dir)) fs::remove_all(old, ec);
  for (const char* file : {kModelFile, kOptimizerFile}) fs::remove(fs::path(dir) / file, ec);
}

void save_checkpoint(const std::string& dir, const CheckpointContent& content,
                     const TrainState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TD_CHECK_AS(DataError, !ec, "train: cannot create the checkpoint directory ", dir, ": ",
              ec.message());
  const nn::Metadata meta = metadata_of(state);
  check_finite(content.model, dir, state.epoch);
  const fs::path model_path = fs::path(dir) / kModelFile, opt_path = fs::path(dir) / kOptimizerFile;
  const fs::path model_next = model_path.string() + kNext, opt_next = opt_path.string() + kNext;
  nn::save_model(model_next.string(), content.model, meta);
  nn::Metadata opt_meta = meta;
  if (!state.grad_scaler_json.empty()) opt_meta["grad_scaler"] = state.grad_scaler_json;
  nn::save_optimizer(opt_next.string(), content.optimizer, opt_meta);
  rename_or_fail(model_next, model_path);
  rename_or_fail(opt_next, opt_path);
  // A sharded checkpoint this pair replaces (a run resumed without --sharded-checkpoint): `latest`
  // first, as load_checkpoint reads the shards while it exists. A crash before this line resumes
  // from the shards' older epoch, which is consistent, only older.
  if (parallel::is_sharded_checkpoint(dir)) {
    fs::remove(fs::path(dir) / "latest", ec);
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_directory() && e.path().filename().string().starts_with("step-"))
        fs::remove_all(e.path(), ec);
  }
}

TrainState load_checkpoint(const std::string& dir, const Restore& restore) {
  // A save killed part way left its temporaries (up to the model's size each): a resume removes
  // those of writers that are gone, as the next save does.
  for (const char* file : {kModelFile, kOptimizerFile, "latest"})
    remove_stale_temporaries((fs::path(dir) / file).string());
  if (resumes_sharded(dir)) {
    TD_CHECK_AS(DataError, restore.sharded != nullptr, "train: --resume: ", dir,
                " holds a sharded checkpoint (each rank's part, from --sharded-checkpoint); "
                "resume it as a run of ranks under `tandem launch` (--ddp, --tp or --pp, any "
                "layout)");
    const nn::Metadata meta = restore.sharded(dir);
    return state_of(meta, meta, (fs::path(dir) / "latest").string());
  }
  const std::string model_path = (fs::path(dir) / kModelFile).string();
  const std::string optimizer_path = (fs::path(dir) / kOptimizerFile).string();
  std::error_code ec;
  // A save interrupted between its two renames: the new model is in place and the new optimizer
  // waits complete beside it. Finish the commit if the epochs say they belong together.
  const std::string optimizer_next = optimizer_path + kNext;
  if (fs::is_regular_file(optimizer_next, ec) && fs::is_regular_file(model_path, ec) &&
      !fs::exists(model_path + kNext, ec) && epoch_text(model_path) == epoch_text(optimizer_next))
    rename_or_fail(optimizer_next, optimizer_path);
  for (const std::string& path : {model_path, optimizer_path})
    TD_CHECK_AS(DataError, fs::is_regular_file(path, ec), "train: --resume: ", path,
                " does not exist; a checkpoint directory holds ", kModelFile, " and ",
                kOptimizerFile, " (written after each epoch by a run with --checkpoint ", dir, ")");
  const SafetensorsFile model_file = load_safetensors(model_path);
  restore.model(model_file.tensors, model_path);
  const nn::Metadata& m = model_file.metadata;
  const nn::Metadata o = nn::load_optimizer(optimizer_path, restore.optimizer);

  const TrainState state = state_of(m, o, model_path);
  const int64_t optimizer_epoch = int_field(o, "epoch", optimizer_path);
  TD_CHECK_AS(DataError, optimizer_epoch == state.epoch, "train: --resume: ", model_path,
              " is from epoch ", state.epoch, " but ", optimizer_path, " is from epoch ",
              optimizer_epoch, "; the run stopped while saving — delete ", dir,
              " and start again, or restore both files from one epoch");
  return state;
}

}  // namespace tandem::tools
