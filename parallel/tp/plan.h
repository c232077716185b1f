// parallel/tp/plan.h — tensor parallelism applied to a model by a table over the model's own names
// (picotron's apply_tensor_parallel, torch's parallelize_module(module, mesh, plan)). Each entry
// names layers by the end of their dotted names ("attn.c_attn" is every block's) and says how to
// cut them; applying the plan copies the model and puts each named layer's tensor-parallel layer
// in its slot (nn::Visitor::slot), cut from the whole one, so a rank holds one device's model cut
// up and the slices put back together are one device's parameters. The model is written once:
// nothing in it knows it was cut (the attention reads its heads from c_attn's width).
//
//   cut              the layer in the slot         becomes                      communicates
//   Column(stride)   nn::Linear                    ColumnParallelLinear         f (dX all-reduced)
//   Row              nn::Linear                    RowParallelLinear            g (Y all-reduced)
//   VocabRows        nn::Embedding                 VocabParallelEmbedding       Y all-reduced
//   VocabHead        nn::LMHead (tied to a         VocabParallelHead: logits    f
//                    VocabRows table)              of this rank's rows
//   OwnStream        nn::Dropout, nn::CausalSelf-  the same, its masks drawn from the rank's
//                    Attention                     own stream (they must differ between ranks)
//   ScatterSequence  a top item (sequence          followed by each rank keeping its T/t
//                    parallelism only)             positions (backward: all-gather)
//
// With sequence parallelism the column layers all-gather their input and the row layers
// reduce-scatter their output instead (Korthikanti et al. 2022), OwnStream entries marked
// `under_sequence_parallel` apply too (a dropout over this rank's positions), and the replicated
// parameters after the ScatterSequence item see only this rank's positions: their gradients are
// recorded Partial along "tp", for parallel::reduce_partial_gradients.
#pragma once

#include <tandem/core/generator.h>
#include <tandem/nn/container.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/tp/regions.h>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel::tp {

struct TensorParallelOptions {
  // Split the activations between the regions (LayerNorms, dropouts, residual adds) along the
  // sequence too: all-gather before each column layer and reduce-scatter after each row layer in
  // place of the all-reduces, and 1/t of those activations per rank. T must divide by t.
  bool sequence_parallel = false;
  // The table the plan records every parameter of the model in (placement.h): the sliced ones as
  // Shard along "tp", the others as Replicate (Partial where sequence parallelism makes their
  // gradients partial), under one device's names: what parallel::clip_grad_norm_ reads. Null: a
  // table of the plan's own; a wrapper given none adopts the cuts (placement.h), but one shared
  // table is clearer.
  std::shared_ptr<PlacementTable> placements;
  // The rank's own random stream, for the OwnStream entries (Megatron's model-parallel RNG).
  // Null: one seeded from the model's device's generator seed + 2718 + rank (rank_stream below);
  // give it to save and restore its place with a checkpoint.
  std::shared_ptr<Generator> rank_stream;
};

enum class Cut { Column, Row, VocabRows, VocabHead, OwnStream, ScatterSequence };

struct LayerPlan {
  std::string name;  // the end of the layers' dotted names: "attn.c_attn", "lm_head"
  Cut cut;
  int64_t stride = 1;                    // Column: out_features is `stride` blocks (q | k | v)
  bool under_sequence_parallel = false;  // OwnStream: only with sequence parallelism
};
using Plan = std::vector<LayerPlan>;

/// `plan` applied to a copy of `model` (the same on every rank; left as it was): each rank's
/// Sequential, with the same names, holding its slices. ValueError naming the entry when an
/// entry matches no layer, or a layer of another type than its cut takes; the cut layers name
/// what does not divide by the group's size, and the padding to add.
nn::Sequential parallelize(const nn::Sequential& model, const Group& group, const Plan& plan,
                           TensorParallelOptions options = {});

/// The stream a plan gives this rank by default: seeded with `device`'s generator seed + 2718 +
/// the rank, so that ranks differ and a seed gives the same run again.
std::shared_ptr<Generator> rank_stream(const Group& group, Device device);

}  // namespace tandem::parallel::tp
