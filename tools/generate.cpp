// tools/generate.cpp — `tandem generate`: text from a GPT checkpoint, as nanoGPT's sample.py makes
// it. The checkpoint carries everything needed: the weights, the sizes (its config) and the
// vocabulary. Each new character is drawn from the model's distribution for the next position,
// given the last block_size characters: logits / temperature, the top k kept, softmax, one draw.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/data/char_tokenizer.h>
#include <tandem/nn/serialize.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "commands.h"
#include "train/checkpointing.h"
#include "train/config.h"
#include "train/epoch.h"
#include "train/gpt_vocabulary.h"
#include "train/models.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

// The next id after `context` [1, t]: the last position's logits, sharpened or flattened by the
// temperature (0: the likeliest id), cut to the top k, then one draw.
// Only the tokenizer's `vocab` ids are drawn (not a --vocab-multiple's padding).
int64_t next_id(nn::Sequential& model, const Tensor& context, int64_t vocab, double temperature,
                int64_t top_k) {
  // In float64: a temperature such as 1e-300 is 0 in float32, and x / 0 is NaN.
  const Tensor logits =
      model(context).select(1, context.size(1) - 1).narrow(1, 0, vocab).to(kFloat64);
  // NaN or inf logits would draw "plausible" characters from garbage (argmax and top-k pass over
  // a NaN): refuse instead. One read: the maximum is NaN when any logit is (max keeps NaN).
  const double peak = logits.max().item();
  TD_CHECK_AS(NonFiniteError, std::isfinite(peak),
              "generate: the model's logits are NaN or inf: its weights cannot be trusted");
  if (temperature == 0) return int64_t(logits.argmax().item());
  // The largest logit subtracted first: a tiny temperature (1e-300) then sends the others to
  // -inf and the likeliest to 0, never inf - inf = NaN.
  Tensor scaled = (logits - peak) / temperature;
  if (top_k > 0 && top_k < scaled.size(1)) {
    const Tensor kth = topk(scaled, top_k).first.narrow(1, top_k - 1, 1);  // [1, 1]
    scaled = where(scaled.lt(kth),
                   full({}, -std::numeric_limits<double>::infinity(), scaled.options()), scaled);
  }
  return int64_t(multinomial(softmax(scaled, -1), 1).item());
}

// A sharded checkpoint names a tied tensor once (transformer.wte.weight, not lm_head.weight as
// well, as a whole-file one does): give the file's tensor the model's other names for it.
void add_tied_names(nn::Module& model, NamedTensorList& tensors) {
  const nn::StateDict own = model.state_dict();
  std::map<const TensorImpl*, std::string> first_name;
  for (const auto& [name, t] : own) first_name.emplace(&t.impl(), name);
  std::map<std::string, Tensor> saved(tensors.begin(), tensors.end());
  for (const auto& [name, t] : own) {
    const std::string& first = first_name.at(&t.impl());
    if (!saved.contains(name) && first != name && saved.contains(first))
      tensors.emplace_back(name, saved.at(first));
  }
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  TD_CHECK_VALUE(o.tokens >= 0, "generate: --tokens must be >= 0, but got ", o.tokens);
  TD_CHECK_VALUE(o.temperature >= 0 && std::isfinite(o.temperature),
                 "generate: --temperature must be >= 0 (0: always the likeliest), but got ",
                 o.temperature);
  TD_CHECK_VALUE(o.top_k >= 0, "generate: --top-k must be >= 0 (0: all), but got ", o.top_k);
  [[maybe_unused]] const Device named(o.device);  // a bad name fails here
  if (dry_run()) return dry_run_done("generate");
  // A whole-file checkpoint, or the shards every rank of a --sharded-checkpoint run wrote (read
  // here whole, by one process): the newest, as a resume would take it.
  const bool sharded = resumes_sharded(o.checkpoint);
  const std::string path =
      (fs::path(o.checkpoint) / (sharded ? "latest" : "model.safetensors")).string();
  TD_CHECK_AS(DataError, fs::is_regular_file(path), "generate: ", path,
              " does not exist (`tandem train --model gpt --checkpoint ", o.checkpoint,
              "` writes it)");
  SafetensorsFile file;
  if (sharded) {
    file.metadata = parallel::sharded_checkpoint_metadata(o.checkpoint);
    for (auto& [name, t] : parallel::load_sharded_model_state(o.checkpoint))
      file.tensors.emplace_back(name, t);
  } else {
    file = load_safetensors(path);
  }
  const auto config = file.metadata.find("config"), vocab = file.metadata.find("vocabulary");
  TD_CHECK_AS(DataError, config != file.metadata.end() && vocab != file.metadata.end(), path,
              ": no config or vocabulary in its metadata: not a checkpoint of `tandem train "
              "--model gpt`");
  const GptOptions g = gpt_options_from_json(config->second, path);
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_string(vocab->second, path);
  // nanoGPT's default 200 means "all" for a vocabulary of fewer characters; a K the user chose
  // above the vocabulary is a mistake to say, not to follow silently.
  TD_CHECK_VALUE(!o.top_k_given || o.top_k <= tokenizer.vocab_size(), "generate: --top-k ", o.top_k,
                 " is more than the vocabulary's ", tokenizer.vocab_size(),
                 " characters (0 draws from all of them)");
  for (const auto& [name, t] : file.tensors)
    TD_CHECK_AS(NonFiniteError,
                !is_floating(t.dtype()) || std::isfinite(abs(t).sum().to(kFloat64).item()),
                "generate: ", path, ": \"", name,
                "\" holds NaN or inf; text drawn from it would mean nothing");

  // One device needs no padding: the checkpoint's table cut to its characters (one of an older
  // run may still hold its --vocab-multiple's rows, which the model never reads).
  const int64_t tokens = tokenizer.vocab_size();
  nn::Sequential model = make_gpt(g, tokens, tokens, false);
  if (sharded) add_tied_names(model, file.tensors);
  file.tensors = fit_embedding_rows(std::move(file.tensors), tokens, tokens);
  model.load_state_dict(file.tensors, true, path);
  const Device device(o.device);
  model.to(device);
  model.eval();

  std::vector<int64_t> ids =
      tokenizer.encode(data::decode_utf8(o.prompt, "the prompt"), "the prompt");
  TD_CHECK_VALUE(!ids.empty(), "generate: --prompt is empty; give at least one character");
  manual_seed(o.seed);
  NoGradGuard no_grad;
  std::printf("%s", o.prompt.c_str());
  for (int64_t i = 0; i < o.tokens; ++i) {
    const size_t t = std::min(ids.size(), size_t(g.block_size));  // the context window
    const Tensor context =
        from_vector(std::vector<int64_t>(ids.end() - long(t), ids.end()), {1, int64_t(t)})
            .to(device);
    ids.push_back(next_id(model, context, tokenizer.vocab_size(), o.temperature, o.top_k));
    std::printf("%s", tokenizer.decode({ids.back()}).c_str());
    std::fflush(stdout);
  }
  std::printf("\n");
  return 0;
}

}  // namespace tandem::tools
