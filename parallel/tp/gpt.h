// parallel/tp/gpt.h — Megatron-LM's tensor-parallel plan for Tandem's GPT (nn/gpt.h), as a table
// over nanoGPT's names (plan.h applies it to the one model):
//
//   transformer.wte      VocabRows: the token table's rows (token ids) split t ways
//   transformer          ScatterSequence (with sequence parallelism): after the embedding (and
//                        its learned positions, its dropout), each rank keeps its T/t positions
//   h.i.attn             OwnStream: attention over this rank's heads draws its own masks
//   h.i.attn.c_attn      Column, stride 3: rank r computes q, k and v of heads
//                        [r·H/t, (r+1)·H/t) and attends over them alone
//   h.i.attn.c_proj      Row: the heads' partial products summed over the group
//   h.i.mlp.c_fc         Column: 4C/t hidden features per rank
//   h.i.mlp.c_proj       Row
//   attn.resid_dropout,  OwnStream with sequence parallelism: each rank's positions
//   mlp.dropout
//   lm_head              VocabHead: this rank's rows of wte (the same tensor), giving logits for
//                        its V/t tokens, read by vocab_parallel_cross_entropy (gpt_loss below)
//                        without gathering them
//   the rest             replicated: wpe (every rank adds the same positions), the LayerNorms
//                        (their inputs are the same on every rank, or with sequence parallelism
//                        this rank's positions, their gradients then summed over the group)
//
// Per block, forward all-reduces two [B, T, C] tensors (after attn.c_proj and mlp.c_proj) and
// backward two (before c_attn and c_fc), as Megatron's paper counts; with sequence parallelism
// each all-reduce becomes a reduce-scatter and an all-gather, and the LayerNorms, dropouts and
// residual adds work on this rank's T/t positions. Every rank builds the same whole GPT (same
// seed) and keeps its slices, so the tensor-parallel model is one device's model cut up.
#pragma once

#include <tandem/nn/gpt.h>
#include <tandem/parallel/tp/plan.h>

namespace tandem::parallel::tp {

/// The table above.
Plan gpt_plan();
/// The entries of one transformer block (attention and MLP): a block's input and output are
/// [B, T, C] on every rank ([B, T/t, C], this rank's positions, with sequence parallelism).
Plan block_plan();

/// gpt_plan() applied to `gpt` (nn::gpt's Sequential, the same on every rank; left as it was): a
/// Sequential with the same item names (and, with sequence parallelism, the scatter after the
/// embedding), each rank holding its slices. A block wrapped in nn::Checkpointed stays
/// checkpointed (its recompute replays the masks drawn from the rank's own stream too). Heads and
/// vocabulary (and, with sequence parallelism, the sequence) must divide by the group's size:
/// the errors name the padding.
nn::Sequential tensor_parallel_gpt(const nn::Sequential& gpt, const Group& group,
                                   TensorParallelOptions options = {});

/// The token table's rows for `vocab_size` tokens on `tp_size` ranks: rounded up to a multiple
/// of tp_size and of `multiple` (64, say, for GEMM-friendly shapes). Give it to the GPT as
/// GPTConfig::padded_vocab_size: the padding is never read, so the model stays the unpadded one,
/// whatever tp_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t multiple = 1);

/// nanoGPT's loss from this rank's logits [B, T, V/t] and the targets [B, T] (−1: ignored).
Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group);

}  // namespace tandem::parallel::tp
