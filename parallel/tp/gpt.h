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
// backward two (before c_attn and c_fc), as Megatron's paper counts; with sequence parallelism
// each all-reduce becomes a reduce-scatter and an all-gather, and the LayerNorms, dropouts and
// residual adds work on this rank's T/t positions. The model is made from a
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

struct TensorParallelOptions {
  // Split the activations between the regions (LayerNorms, dropouts, residual adds) along the
  // sequence too: all-gather before each column layer and reduce-scatter after each row layer in
  // place of the all-reduces, and 1/t of those activations per rank. T must divide by t. The
  // replicated parameters then get partial gradients: they are recorded Partial along "tp",
  // and parallel::reduce_partial_gradients sums them.
  bool sequence_parallel = false;
  // The table the plan records every parameter of the model in (placement.h): the sliced ones as
  // Shard along "tp", the others as Replicate (Partial with sequence parallelism), under one
  // device's names: what parallel::clip_grad_norm_ reads. Null: a table of the plan's own; a
  // wrapper given none adopts the cuts (placement.h), but one shared table is clearer.
  std::shared_ptr<PlacementTable> placements;
};

/// What every module of the plan shares: the group, the options, and the rank's own random
/// stream (seeded seed + 2718 + rank, Megatron's model-parallel RNG) for the dropouts whose
/// elements differ from rank to rank: attention over this rank's heads, and, with sequence
/// parallelism, every dropout (this rank's positions). Other dropouts draw the same on every rank.
struct Plan {
  Group group;
  TensorParallelOptions options;
  std::shared_ptr<Generator> rank_stream;
};

/// Causal self-attention over this rank's H/t heads.
struct ParallelAttention : nn::Module {
  ParallelAttention(const nn::CausalSelfAttention& whole, const Plan& plan);

  int64_t n_head, n_embd;  // of the whole layer; this rank runs n_head / t heads
  double dropout;
  ColumnParallelLinear c_attn;
  RowParallelLinear c_proj;
  nn::Dropout resid_dropout;
  Plan plan;

  /// [B, T, C] -> [B, T, C], every rank the same ([B, T/t, C] each way with sequence parallelism)
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

struct ParallelMLP : nn::Module {
  ParallelMLP(const nn::MLP& whole, const Plan& plan);

  ColumnParallelLinear c_fc;
  GeluApproximate gelu;
  RowParallelLinear c_proj;
  nn::Dropout dropout;
  Plan plan;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

struct ParallelBlock : nn::Module {
  ParallelBlock(const nn::Block& whole, const Plan& plan);

  nn::LayerNorm ln_1;
  ParallelAttention attn;
  nn::LayerNorm ln_2;
  ParallelMLP mlp;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
};

/// Token ids [B, T] -> [B, T, C] (this rank's [B, T/t, C] with sequence parallelism): the
/// vocabulary-parallel wte plus the replicated wpe.
struct ParallelGPTEmbedding : nn::Module {
  ParallelGPTEmbedding(const nn::GPTEmbedding& whole, const Plan& plan);

  int64_t block_size;
  VocabParallelEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  Plan plan;

  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  void visit(nn::Visitor& v) override;
};

/// x [B, T, C] (or [B, T/t, C]) -> this rank's logits [B, T, V/t], from the tied weight (this
/// rank's wte rows). The columns of a padded table's rows (past `vocab_size`) are −∞: no
/// probability, no gradient, so the loss is the unpadded model's and the padding stays zero.
struct ParallelLMHead : nn::Module {
  ParallelLMHead(Tensor weight, Plan plan, int64_t vocab_start, int64_t vocab_size);
  Tensor weight;  // [V/t, C], the same tensor as the embedding's
  Plan plan;
  int64_t tokens;  // this rank's rows that are tokens; the rest (the last ranks') are padding

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override { v("weight", weight); }
};

/// The plan above, applied to `gpt` (nn::gpt's Sequential, the same on every rank): a Sequential
/// with the same item names, each rank holding its slices (copies; `gpt` is left as it was). A
/// block wrapped in nn::Checkpointed stays checkpointed (its recompute replays the masks drawn
/// from the rank's own stream too).
/// Heads and vocabulary (and, with sequence parallelism, the sequence) must divide by the group's
/// size: the errors name the padding.
nn::Sequential tensor_parallel_gpt(nn::Sequential& gpt, const Group& group,
                                   TensorParallelOptions options = {});

/// The rank's own random stream of a model tensor_parallel_gpt made, or of a pipeline stage of
/// one (to save and restore with a checkpoint: every rank draws as many numbers from its stream,
/// so one offset serves all; a pipeline's stages draw different amounts).
std::shared_ptr<Generator> rank_stream(nn::Sequential& tp_gpt);

/// The token table's rows for `vocab_size` tokens on `tp_size` ranks: rounded up to a multiple
/// of tp_size and of `multiple` (64, say, for GEMM-friendly shapes). Give it to the GPT as
/// GPTConfig::padded_vocab_size: the padding is never read, so the model stays the unpadded one,
/// whatever tp_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t multiple = 1);

/// nanoGPT's loss from this rank's logits [B, T, V/t] and the targets [B, T] (−1: ignored).
Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group);

}  // namespace tandem::parallel::tp
