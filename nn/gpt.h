// nn/gpt.h — a GPT (GPT-2's architecture, as nanoGPT's model.py writes it) as one flat Sequential:
//
//   "transformer"        GPTEmbedding: token (wte) + position (wpe) embeddings, dropout
//   "transformer.h.0"…   Block × n_layer
//   "transformer.ln_f"   LayerNorm
//   "lm_head"            LMHead: logits = x · wteᵀ, its weight *the same tensor* as wte's
//
// Flat, because every parallel mode splits a Sequential by position (a pipeline puts blocks on
// stages); the dotted item names give the parameters nanoGPT's names ("transformer.h.0.attn.
// c_attn.weight"), so a state dict loads into nanoGPT's GPT. The tied weight is one tensor under
// two names: parameters() lists it once (as "transformer.wte.weight"), state_dict() under both.
#pragma once

#include <tandem/nn/container.h>
#include <tandem/nn/embedding.h>
#include <tandem/nn/transformer.h>
#include <functional>

namespace tandem::nn {

/// ids [B, T] (int64, T <= block_size) -> wte(ids) + wpe(0..T−1), then dropout: [B, T, C].
struct GPTEmbedding : Module {
  explicit GPTEmbedding(const GPTConfig& config);

  int64_t block_size;
  // The positions of the T ids (int64 [T]); null: 0, 1, …, T−1. A context-parallel plan gives
  // this rank's positions of the whole sequence here (parallel/cp/plan.h).
  std::function<Tensor(int64_t T, Device device)> positions;
  AnyModule wte;  // nn::Embedding(vocab rows, C), in a slot: a plan may split it by rows
  Embedding wpe;
  Dropout drop;

  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  void visit(Visitor& v) override;
};

/// x [B, T, C] -> logits [B, T, vocab_size]: a Linear without bias whose weight is given (tied).
/// A padded table's rows past vocab_size are not read (GPTConfig::padded_vocab_size).
struct LMHead : Module {
  explicit LMHead(Tensor weight, int64_t vocab_size = -1)
      : weight(std::move(weight)), vocab_size(vocab_size < 0 ? this->weight.size(0) : vocab_size) {}
  Tensor weight;  // [rows, C]: vocab_size tokens, then any padding
  int64_t vocab_size;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override { v("weight", weight); }
  std::string extra_repr() const override;
};

/// A GPT initialised as nanoGPT's: every Linear and Embedding weight from N(0, 0.02), biases
/// zero, and each residual projection (attn.c_proj, mlp.c_proj) from N(0, 0.02/√(2·n_layer)).
Sequential gpt(const GPTConfig& config);

/// Cross entropy of logits [B, T, V] against next-token targets [B, T] (−1: ignored), the mean
/// over all positions: nanoGPT's loss.
Tensor gpt_loss(const Tensor& logits, const Tensor& targets);

}  // namespace tandem::nn
