// tools/train/checkpointing.cpp — the metadata around nn::save_model / nn::save_optimizer. The
// model file is written first: a crash between the two writes leaves a new model beside an old
// optimizer, which load_checkpoint detects by their epochs disagreeing.
#include <tandem/core/check.h>
#include <tandem/nn/checkpoint.h>
#include <charconv>
#include <filesystem>

#include "checkpointing.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";

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

}  // namespace

void save_checkpoint(const std::string& dir, nn::Module& model, const optim::Optimizer& optimizer,
                     const TrainState& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TD_CHECK_AS(DataError, !ec, "train: cannot create the checkpoint directory ", dir, ": ",
              ec.message());
  const nn::Metadata meta = {{"epoch", std::to_string(state.epoch)},
                             {"global_step", std::to_string(state.global_step)},
                             {"generator", nn::to_string(state.generator)},
                             {"config", state.config_json}};
  nn::save_model((fs::path(dir) / kModelFile).string(), model, meta);
  nn::save_optimizer((fs::path(dir) / kOptimizerFile).string(), optimizer, meta);
}

TrainState load_checkpoint(const std::string& dir, nn::Module& model, optim::Optimizer& optimizer) {
  const std::string model_path = (fs::path(dir) / kModelFile).string();
  const std::string optimizer_path = (fs::path(dir) / kOptimizerFile).string();
  std::error_code ec;
  for (const std::string& path : {model_path, optimizer_path})
    TD_CHECK_AS(DataError, fs::is_regular_file(path, ec), "train: --resume: ", path,
                " does not exist; a checkpoint directory holds ", kModelFile, " and ",
                kOptimizerFile, " (written after each epoch by a run with --checkpoint ", dir, ")");
  const nn::Metadata m = nn::load_model(model_path, model);
  const nn::Metadata o = nn::load_optimizer(optimizer_path, optimizer);

  TrainState state;
  state.epoch = int_field(m, "epoch", model_path);
  state.global_step = int_field(m, "global_step", model_path);
  state.generator = nn::generator_state_from_string(field(m, "generator", model_path), model_path);
  state.config_json = field(m, "config", model_path);
  const int64_t optimizer_epoch = int_field(o, "epoch", optimizer_path);
  TD_CHECK_AS(DataError, optimizer_epoch == state.epoch, "train: --resume: ", model_path,
              " is from epoch ", state.epoch, " but ", optimizer_path, " is from epoch ",
              optimizer_epoch, "; the run stopped while saving — delete ", dir,
              " and start again, or restore both files from one epoch");
  return state;
}

}  // namespace tandem::tools
