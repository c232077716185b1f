// parallel/tp/vocab_parallel.h — the vocabulary split over a tensor-parallel group: the token
// embedding by rows (rank r holds the vectors of tokens [r·V/t, (r+1)·V/t)), and the loss read
// from each rank's V/t logits without ever gathering the B·T·V of them (Megatron-LM's
// VocabParallelEmbedding and vocab_parallel_cross_entropy). With the lm_head tied to the
// embedding, each rank's slice of the head is its slice of the table: one tensor, as on one
// device.
#pragma once

#include <tandem/nn/embedding.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/tp/regions.h>

namespace tandem::parallel::tp {

struct VocabParallelEmbedding : nn::Module {
  /// Rank group->rank()'s rows of `whole`, copied. V must divide by t (the error names the
  /// padding; Megatron pads the vocabulary the same way). Records the rows as a Shard along "tp"
  /// in `placements` (null: in placement.h's registry only).
  VocabParallelEmbedding(const nn::Embedding& whole, Group group,
                         PlacementTable* placements = nullptr);

  int64_t num_embeddings, embedding_dim;  // of the whole table
  int64_t vocab_start;                    // the first token id this rank holds
  Group group;
  Tensor weight;  // [num_embeddings / t, embedding_dim]

  /// ids (int64, any shape, every rank the same) -> [..., embedding_dim], every rank the same:
  /// each rank looks up the ids in its range (zeros elsewhere) and the group sums them. An id
  /// outside [0, num_embeddings) is an IndexError naming it, as for nn::Embedding.
  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  /// This rank's part of forward, before the group's sum: its rows, zeros for the others.
  Tensor partial(const Tensor& ids) const;
  void visit(nn::Visitor& v) override { v("weight", weight); }
  std::string extra_repr() const override;
};

/// The tied head over a VocabParallelEmbedding: x [B, T, C] (this rank's [B, T/t, C] with sequence
/// parallelism, all-gathered first) -> this rank's logits [B, T, V/t], from its rows of the table
/// (the same tensor as the embedding's), read by vocab_parallel_cross_entropy without gathering
/// them. The columns of a padded table's rows (past `vocab_size`) are −∞: no probability, no
/// gradient, so the loss is the unpadded model's and the padding stays zero.
struct VocabParallelHead : nn::Module {
  VocabParallelHead(Tensor weight, Group group, int64_t vocab_start, int64_t vocab_size,
                    bool sequence_parallel);
  Tensor weight;  // [V/t, C], the same tensor as the embedding's
  Group group;
  int64_t tokens;  // this rank's rows that are tokens; the rest (the last ranks') are padding
  bool sequence_parallel;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override { v("weight", weight); }
  std::string extra_repr() const override;
};

/// The mean cross entropy over the positions whose target is not `ignore_index`, from this rank's
/// logits [..., V/t] (columns [vocab_start, vocab_start + V/t) of the whole [..., V]) and the
/// targets [...] (every rank the same). Three all-reduces of one number per position (the row
/// maximum, the sum of exponentials, the target's logit) give every rank the loss one device
/// computes; backward writes softmax − one-hot into this rank's columns only.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    int64_t vocab_start, const Group& group,
                                    int64_t ignore_index = -1);

}  // namespace tandem::parallel::tp
