// tools/train/gpt_resume.cpp — the saved vocabulary, and zero rows for a wider padding.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/nn/optim/param_groups.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <filesystem>
#include <memory>

#include "config.h"
#include "gpt_resume.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

constexpr char kEmbedding[] = "transformer.wte.weight";

// `t` with zero rows appended up to `rows` (t itself when it has them already).
Tensor with_rows(const Tensor& t, int64_t rows) {
  if (t.size(0) == rows) return t;
  Shape pad = t.shape();
  pad[0] = rows - t.size(0);
  return cat({t, zeros(pad, t.options())}, 0);
}

}  // namespace

SavedVocabulary saved_vocabulary(const std::string& dir) {
  const bool sharded = resumes_sharded(dir);
  const std::string path = (fs::path(dir) / (sharded ? "latest" : "model.safetensors")).string();
  TD_CHECK_AS(DataError, fs::is_regular_file(path), "train: --resume: ", path,
              " does not exist (a run with --checkpoint ", dir, " writes it)");
  const auto meta =
      sharded ? parallel::sharded_checkpoint_metadata(dir) : load_safetensors(path).metadata;
  const auto it = meta.find("vocabulary");
  TD_CHECK_AS(DataError, it != meta.end(), "train: --resume: ", path,
              " has no vocabulary: it is not a checkpoint of `tandem train --model gpt`");
  const auto config = meta.find("config");
  const int64_t multiple =
      config == meta.end() ? 1 : gpt_options_from_json(config->second, path).vocab_multiple;
  return {data::CharTokenizer::from_string(it->second, path), multiple};
}

Restore fit_vocabulary_rows(Restore restore, nn::Module& whole) {
  Tensor wte;
  for (const auto& [name, p] : whole.named_parameters())
    if (name == kEmbedding) wte = p;
  TD_CHECK_VALUE(wte.defined(), "fit_vocabulary_rows: the model has no ", kEmbedding);
  const int64_t rows = wte.size(0);
  // The embedding's index in the checkpoint's optimizer state: one device's AdamW groups list
  // the decaying tensors (2-D and up) first, in the model's order (make_gpt_optimizer).
  const std::vector<Tensor> decay = optim::weight_decay_groups(whole.named_parameters()).decay;
  int64_t index = -1;
  for (size_t j = 0; j < decay.size(); ++j)
    if (&decay[j].impl() == &wte.impl()) index = int64_t(j);
  const std::string prefix = str("state.", index, ".");
  // The saved row count, learnt from the model file, which is read first.
  auto saved = std::make_shared<int64_t>(rows);
  Restore fitted = restore;
  fitted.model = [inner = restore.model, rows, saved](const nn::StateDict& sd,
                                                      const std::string& path) {
    nn::StateDict out = sd;
    for (auto& [name, t] : out) {
      if (name != kEmbedding && name != "lm_head.weight") continue;
      *saved = t.size(0);
      TD_CHECK_AS(DataError, t.size(0) <= rows, "train: --resume: ", path, "'s vocabulary has ",
                  t.size(0), " rows (its characters padded by its --vocab-multiple), this run's ",
                  rows, ": the rows past ", rows,
                  " were trained, so the checkpoint cannot shrink\n  hint: leave --vocab-multiple "
                  "out, and the checkpoint's is used");
      t = with_rows(t, rows);
    }
    inner(out, path);
  };
  fitted.optimizer = [inner = restore.optimizer, rows, saved,
                      prefix](const optim::OptimizerState& state) {
    optim::OptimizerState out = state;
    for (auto& [name, t] : out.tensors)
      if (name.starts_with(prefix) && t.dim() == 2 && t.size(0) == *saved)
        t = with_rows(t, rows);  // AdamW's moments of the embedding
    inner(out);
  };
  return fitted;
}

}  // namespace tandem::tools
