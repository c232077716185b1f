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
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "commands.h"
#include "train/config.h"
#include "train/models.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

// The next id after `context` [1, t]: the last position's logits, sharpened or flattened by the
// temperature (0: the likeliest id), cut to the top k, then one draw.
// Only the tokenizer's `vocab` ids are drawn (not a --vocab-multiple's padding).
int64_t next_id(nn::Sequential& model, const Tensor& context, int64_t vocab, double temperature,
                int64_t top_k) {
  const Tensor logits = model(context).select(1, context.size(1) - 1).narrow(1, 0, vocab);
  if (temperature == 0) return int64_t(logits.argmax().item());
  Tensor scaled = logits / temperature;
  if (top_k > 0 && top_k < scaled.size(1)) {
    const Tensor kth = topk(scaled, top_k).first.narrow(1, top_k - 1, 1);  // [1, 1]
    scaled = where(scaled.lt(kth),
                   full({}, -std::numeric_limits<double>::infinity(), scaled.options()), scaled);
  }
  return int64_t(multinomial(softmax(scaled, -1), 1).item());
}

}  // namespace

int run_generate(const GenerateOptions& o) {
  TD_CHECK_VALUE(o.tokens >= 0, "generate: --tokens must be >= 0, but got ", o.tokens);
  TD_CHECK_VALUE(o.temperature >= 0 && std::isfinite(o.temperature),
                 "generate: --temperature must be >= 0 (0: always the likeliest), but got ",
                 o.temperature);
  TD_CHECK_VALUE(o.top_k >= 0, "generate: --top-k must be >= 0 (0: all), but got ", o.top_k);
  const std::string path = (fs::path(o.checkpoint) / "model.safetensors").string();
  TD_CHECK_AS(DataError, fs::is_regular_file(path), "generate: ", path,
              " does not exist (`tandem train --model gpt --checkpoint ", o.checkpoint,
              "` writes it)");
  const SafetensorsFile file = load_safetensors(path);
  const auto config = file.metadata.find("config"), vocab = file.metadata.find("vocabulary");
  TD_CHECK_AS(DataError, config != file.metadata.end() && vocab != file.metadata.end(), path,
              ": no config or vocabulary in its metadata: not a checkpoint of `tandem train "
              "--model gpt`");
  const GptOptions g = gpt_options_from_json(config->second, path);
  const data::CharTokenizer tokenizer = data::CharTokenizer::from_string(vocab->second, path);

  nn::Sequential model = make_gpt(g, padded_vocab(g, tokenizer.vocab_size()), false);
  nn::load_model(path, model);
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
