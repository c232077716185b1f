// parallel/tp/gpt.h — Megatron-LM's tensor-parallel plan applied to Tandem's GPT (nn/gpt.h):
//
//   transformer.wte      VocabParallelEmbedding: rows (token ids) split t ways
//   transformer.wpe      replicated (every rank adds the same position vectors)
//   h.i.ln_1, ln_2, ln_f replicated: their inputs are the same on every rank, and so are their
//                        gradients (each comes back through an all-reduce), so they stay equal
//   h.i.attn.c_attn      ColumnParallelLinear, stride 3: rank r computes q, k and v of heads
//                        [r·H/t, (r+1)·H/t) and attends over them alone
//   h.i.attn.c_proj      RowParallelLinear: the heads' partial products summed over the group
//   h.i.mlp.c_fc         ColumnParallelLinear: 4C/t hidden features per rank
//   h.i.mlp.c_proj       RowParallelLinear
//   lm_head              tied: this rank's rows of wte, giving logits for its V/t tokens, read by
//                        vocab_parallel_cross_entropy (gpt_loss below) without gathering them
//
// Per block, forward all-reduces two [B, T, C] tensors (after attn.c_proj and mlp.c_proj) and
// backward two (before c_attn and c_fc), as Megatron's paper counts. The model is made from a
// whole GPT that every rank builds the same way (same seed): each rank copies its slices, so the
// tensor-parallel model is one device's model cut up, and the shards put back together give one
// device's parameters.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/gpt.h>
#include <tandem/nn/layer_norm.h>
#include <tandem/parallel/tp/layers.h>
#include <tandem/parallel/tp/vocab_parallel.h>

namespace tandem::parallel::tp {

/// Causal self-attention over this rank's H/t heads.
struct ParallelAttention : nn::Module {
  ParallelAttention(const nn::CausalSelfAttention& whole, Group group);

  int64_t n_head, n_embd;  // of the whole layer; this rank runs n_head / t heads
  double dropout;
  ColumnParallelLinear c_attn;
  RowParallelLinear c_proj;
  nn::Dropout resid_dropout;
  // The attention dropout's stream: this rank's own (seeded seed + 2718 + rank, Megatron's), so
  // that different heads get different masks, as on one device.
  std::shared_ptr<Generator> region_generator;

  Tensor forward(const Tensor& x) const;  // [B, T, C] -> [B, T, C], every rank the same
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

struct ParallelMLP : nn::Module {
  ParallelMLP(const nn::MLP& whole, Group group);

  ColumnParallelLinear c_fc;
  GeluApproximate gelu;
  RowParallelLinear c_proj;
  nn::Dropout dropout;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

struct ParallelBlock : nn::Module {
  ParallelBlock(const nn::Block& whole, const Group& group);

  nn::LayerNorm ln_1;
  ParallelAttention attn;
  nn::LayerNorm ln_2;
  ParallelMLP mlp;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

/// Token ids [B, T] -> [B, T, C]: the vocabulary-parallel wte plus the replicated wpe.
struct ParallelGPTEmbedding : nn::Module {
  ParallelGPTEmbedding(const nn::GPTEmbedding& whole, const Group& group);

  int64_t block_size;
  VocabParallelEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;

  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  void visit(nn::Visitor& v) override;
};

/// x [B, T, C] -> this rank's logits [B, T, V/t], from the tied weight (this rank's wte rows).
struct ParallelLMHead : nn::Module {
  ParallelLMHead(Tensor weight, Group group) : weight(std::move(weight)), group(std::move(group)) {}
  Tensor weight;  // [V/t, C], the same tensor as the embedding's
  Group group;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override { v("weight", weight); }
};

/// The plan above, applied to `gpt` (nn::gpt's Sequential, the same on every rank): a Sequential
/// with the same item names, each rank holding its slices (copies; `gpt` is left as it was).
/// Heads and vocabulary must divide by the group's size: the errors name the padding.
nn::Sequential tensor_parallel_gpt(nn::Sequential& gpt, const Group& group);

/// nanoGPT's loss from this rank's logits [B, T, V/t] and the targets [B, T] (−1: ignored).
Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group);

}  // namespace tandem::parallel::tp
