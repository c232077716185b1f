// parallel/cp/plan.h — context parallelism applied to a GPT: each rank of the group trains on its
// positions of every sequence (sequence_split.h), its blocks' heads attending over the whole
// sequence by ring attention or by Ulysses, its embedding reading its positions' rows of wpe.
// Everything else in a transformer works position by position, so it runs on the rank's
// positions as it is: the model is written once, and nothing in it knows it was cut.
//
//   cp = 2, zig-zag, T = 8         rank 0                     rank 1
//   ids, targets [B, T/cp]         positions 0 1 6 7          positions 2 3 4 5
//   wte + wpe                      wpe rows 0 1 6 7           wpe rows 2 3 4 5
//   attention (each block)         ◀──── k, v round the ring (or two all-to-alls) ────▶
//   LayerNorm, MLP, lm_head        its positions only         its positions only
//   loss                           mean over its positions    mean over its positions
//
// The parameters are whole on every rank, and each rank's gradient is its positions' share of
// the mean's: the ranks' mean is the whole sequence's gradient. So data parallelism over the
// data and context ranks together (DeviceMesh::flatten({"dp", "cp"})) reduces them, as
// torchtitan's FSDP over dp_shard × cp does, and the losses' mean is the whole batch's.
#pragma once

#include <tandem/nn/container.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <tandem/parallel/placement.h>
#include <memory>
#include <string>

namespace tandem::parallel::cp {

/// The mesh dimension of the context-parallel ranks, and the one data parallelism over them and
/// the data-parallel ranks together records (torchtitan's dp_shard_cp).
inline const std::string kDimension = "cp", kDataDimension = "dp_cp";

enum class Algorithm { Ring, Ulysses };
/// "ring" or "ulysses"; ValueError naming `name` otherwise.
Algorithm parse_algorithm(const std::string& name);
const char* to_string(Algorithm algorithm);

struct ContextParallelOptions {
  Algorithm algorithm = Algorithm::Ring;
  SequenceSplit split = SequenceSplit::ZigZag;
  // The table earlier wrappers (TP's plan) recorded their cuts in: the entries follow the copy's
  // tensors. The plan adds no dimension: the tensors are whole on every rank of the group, and
  // the data-parallel wrapper over dp × cp records the one they are reduced over ("dp_cp").
  std::shared_ptr<PlacementTable> placements;
};

/// A copy of `model` (its own tensors; `model` is left as it was) whose every CausalSelfAttention
/// attends over the group's whole sequence and whose GPTEmbedding reads this rank's positions:
/// give it this rank's positions of each batch (shard_batch). ValueError when the model has no
/// attention to split; the attention names heads that do not divide by cp (Ulysses), the
/// embedding a sequence longer than the block size or one that does not split.
nn::Sequential context_parallel(const nn::Sequential& model,
                                const std::shared_ptr<Communicator>& group,
                                ContextParallelOptions options = {});

/// This rank's positions of a batch [B, T] of ids or targets (dim 1, the split's chunks).
Tensor shard_batch(const Tensor& batch, const Communicator& group, SequenceSplit split);

}  // namespace tandem::parallel::cp
