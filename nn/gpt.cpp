// nn/gpt.cpp — the GPT Sequential, its embedding and tied head, and nanoGPT's initialisation.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/gpt.h>
#include <tandem/nn/init.h>
#include <cmath>

namespace tandem::nn {

GPTEmbedding::GPTEmbedding(const GPTConfig& c)
    : block_size(c.block_size),
      wte(Embedding(c.vocab_size, c.n_embd, {.tensor = c.tensor})),
      wpe(c.block_size, c.n_embd, {.tensor = c.tensor}),
      drop(c.dropout) {}

Tensor GPTEmbedding::forward(const Tensor& ids) const {
  TD_CHECK_SHAPE(ids.dim() == 2, "GPT: token ids must be [B, T], not ", ids.shape());
  const int64_t T = ids.size(1);
  if (positions) return drop(wte(ids) + wpe(positions(T, ids.device())));  // it checks T
  TD_CHECK_SHAPE(T <= block_size, "GPT: a sequence of ", T,
                 " tokens is longer than the block size ", block_size);
  return drop(wte(ids) + wpe(arange(double(T), {.dtype = kInt64, .device = ids.device()})));
}

void GPTEmbedding::visit(Visitor& v) {
  v.slot("wte", wte);
  v("wpe", wpe);
  v("drop", drop);
}

Tensor LMHead::forward(const Tensor& x) const {
  // The padding's rows are never read: their logits would enter the softmax (nanoGPT's), and
  // reading them only to mask them out would cost a pass over the B·T·V logits.
  return linear(x, vocab_size < weight.size(0) ? weight.narrow(0, 0, vocab_size) : weight,
                Tensor());
}

std::string LMHead::extra_repr() const {
  return tandem::str(
      "in_features=", weight.size(1), ", out_features=", vocab_size,
      vocab_size < weight.size(0) ? tandem::str(" (of ", weight.size(0), " rows)") : std::string(),
      ", bias=False");
}

namespace {

// nanoGPT's _init_weights, then the scaled residual projections.
void init_like_nanogpt(Sequential& model, int64_t n_layer) {
  NoGradGuard no_grad;
  for (auto& [name, p] : model.named_parameters()) {
    const bool weight = name.ends_with(".weight");
    const bool norm = name.find(".ln_") != std::string::npos;
    if (norm) continue;  // LayerNorm keeps ones and zeros
    if (!weight) {
      init::zeros_(p);
    } else if (name.ends_with("c_proj.weight")) {
      init::normal_(p, 0, 0.02 / std::sqrt(2.0 * double(n_layer)));
    } else {
      init::normal_(p, 0, 0.02);
    }
  }
}

// Zero rows appended to the token table, the head's weight the same tensor again. Added after
// the model is built and drawn as an unpadded one, so that its numbers are that model's.
void pad_token_table(Sequential& model, int64_t rows) {
  NoGradGuard no_grad;
  Embedding& wte = model.at<GPTEmbedding>(0).wte.get<Embedding>();
  const Tensor& table = wte.weight;
  Tensor padded = cat({table, zeros({rows - table.size(0), table.size(1)}, table.options())}, 0);
  padded.requires_grad_(table.requires_grad());
  wte.weight = padded;
  wte.num_embeddings = rows;
  model.at<LMHead>(model.size() - 1).weight = padded;
}

}  // namespace

Sequential gpt(const GPTConfig& c) {
  TD_CHECK_VALUE(c.block_size > 0 && c.vocab_size > 0 && c.n_layer > 0 && c.n_embd > 0,
                 "gpt: block_size, vocab_size, n_layer and n_embd must be positive, got ",
                 c.block_size, ", ", c.vocab_size, ", ", c.n_layer, ", ", c.n_embd);
  TD_CHECK_VALUE(c.padded_vocab_size == 0 || c.padded_vocab_size >= c.vocab_size,
                 "gpt: padded_vocab_size ", c.padded_vocab_size, " is less than vocab_size ",
                 c.vocab_size, " (0: no padding)");
  GPTEmbedding embedding(c);
  LMHead head(embedding.wte.get<Embedding>().weight,
              c.vocab_size);  // the tie: one tensor, two names
  Sequential model;
  model.push_back("transformer", std::move(embedding));
  for (int64_t i = 0; i < c.n_layer; ++i)
    model.push_back(tandem::str("transformer.h.", i),
                    Block(c, c.moe_every > 0 && i % c.moe_every == 0));
  model.push_back("transformer.ln_f", LayerNorm(c.n_embd, {.bias = c.bias, .tensor = c.tensor}));
  model.push_back("lm_head", std::move(head));
  init_like_nanogpt(model, c.n_layer);
  if (c.padded_vocab_size > c.vocab_size) pad_token_table(model, c.padded_vocab_size);
  return model;
}

Tensor gpt_loss(const Tensor& logits, const Tensor& targets) {
  TD_CHECK_SHAPE(logits.dim() == 3 && targets.dim() == 2 && logits.size(0) == targets.size(0) &&
                     logits.size(1) == targets.size(1),
                 "gpt_loss: logits ", logits.shape(), " and targets ", targets.shape(),
                 " must be [B, T, V] and [B, T]");
  return cross_entropy(logits.reshape({-1, logits.size(2)}), targets.reshape({-1}),
                       {.ignore_index = -1});
}

}  // namespace tandem::nn
