// tools/train/gpt_vocabulary.cpp — the saved vocabulary, and the embedding's rows cut for a
// checkpoint and padded again for a run.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/nn/optim/param_groups.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <filesystem>
#include <numeric>

#include "gpt_vocabulary.h"
#include "models.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

bool is_embedding(const std::string& name) {
  return name == "transformer.wte.weight" || name == "lm_head.weight";
}

// The first `tokens` rows of `t`, then zero rows up to `rows`.
Tensor fit_rows(const Tensor& t, int64_t tokens, int64_t rows) {
  if (t.size(0) == rows && rows == tokens) return t;
  NoGradGuard no_grad;
  TD_CHECK_AS(DataError, t.size(0) >= tokens, "train: the checkpoint's token embedding has ",
              t.size(0), " rows, fewer than its vocabulary's ", tokens, " characters");
  Tensor kept = t.narrow(0, 0, tokens);
  if (rows == tokens) return kept.contiguous();
  Shape pad = t.shape();
  pad[0] = rows - tokens;
  return cat({kept, zeros(pad, t.options())}, 0);
}

}  // namespace

data::CharTokenizer saved_vocabulary(const std::string& dir) {
  const bool sharded = resumes_sharded(dir);
  const std::string path = (fs::path(dir) / (sharded ? "latest" : "model.safetensors")).string();
  TD_CHECK_AS(DataError, fs::is_regular_file(path), "train: --resume: ", path,
              " does not exist (a run with --checkpoint ", dir, " writes it)");
  const auto meta =
      sharded ? parallel::sharded_checkpoint_metadata(dir) : load_safetensors(path).metadata;
  const auto it = meta.find("vocabulary");
  TD_CHECK_AS(DataError, it != meta.end(), "train: --resume: ", path,
              " has no vocabulary: it is not a checkpoint of `tandem train --model gpt`");
  return data::CharTokenizer::from_string(it->second, path);
}

int64_t table_rows(const GptOptions& g, int64_t characters, const TrainOptions& o) {
  const bool from_shards = o.resume && resumes_sharded(o.checkpoint);
  if (from_shards) {
    const int64_t saved =
        parallel::sharded_checkpoint_shape(o.checkpoint, "transformer.wte.weight")[0];
    TD_CHECK_AS(DataError, saved >= characters && saved % o.tp == 0,
                "train: --resume: the sharded "
                "checkpoint in ",
                o.checkpoint, " holds a token table of ", saved, " rows, which ",
                saved < characters ? str("is fewer than its ", characters, " characters")
                                   : str("does not split into --tp ", o.tp, " equal parts"),
                "\n  hint: resume it under a tensor-parallel size that divides ", saved);
    return saved;
  }
  const bool cut = o.tp > 1 || o.sharded_checkpoint;
  return padded_vocab(g, characters, cut ? std::lcm(g.n_head, int64_t(o.tp)) : 1);
}

VocabularyRows vocabulary_rows(nn::Module& whole, int64_t tokens) {
  Tensor wte;
  for (const auto& [name, p] : whole.named_parameters())
    if (name == "transformer.wte.weight") wte = p;
  TD_CHECK_VALUE(wte.defined(), "vocabulary_rows: the model has no transformer.wte.weight");
  const std::vector<Tensor> decay = optim::weight_decay_groups(whole.named_parameters()).decay;
  int64_t index = -1;
  for (size_t j = 0; j < decay.size(); ++j)
    if (&decay[j].impl() == &wte.impl()) index = int64_t(j);
  return {tokens, wte.size(0), str("state.", index, ".")};
}

nn::StateDict fit_embedding_rows(nn::StateDict state, int64_t tokens, int64_t rows) {
  for (auto& [name, t] : state)
    if (is_embedding(name)) t = fit_rows(t, tokens, rows);
  return state;
}

void unpad(CheckpointContent& content, const VocabularyRows& v) {
  if (v.rows == v.tokens) return;
  content.model = fit_embedding_rows(std::move(content.model), v.tokens, v.tokens);
  for (auto& [name, t] : content.optimizer.tensors)
    if (name.starts_with(v.optimizer_prefix) && t.dim() == 2 && t.size(0) == v.rows)
      t = fit_rows(t, v.tokens, v.tokens);  // AdamW's moments of the embedding
}

Restore fit_vocabulary_rows(Restore restore, const VocabularyRows& v) {
  Restore fitted = restore;
  fitted.model = [inner = restore.model, v](const nn::StateDict& sd, const std::string& path) {
    inner(fit_embedding_rows(sd, v.tokens, v.rows), path);
  };
  fitted.optimizer = [inner = restore.optimizer, v](const optim::OptimizerState& state) {
    optim::OptimizerState out = state;
    for (auto& [name, t] : out.tensors)  // the moments: the embedding's rows, not a step count
      if (name.starts_with(v.optimizer_prefix) && t.dim() == 2) t = fit_rows(t, v.tokens, v.rows);
    inner(out);
  };
  return fitted;
}

}  // namespace tandem::tools
