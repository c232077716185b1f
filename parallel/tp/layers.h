// parallel/tp/layers.h — Megatron-LM's tensor-parallel Linears. y = x·Wᵀ + b with W [out, in]
// split over the t ranks of a tensor-parallel group:
//
//   ColumnParallelLinear  W by rows (output features): rank r holds W[r·out/t : (r+1)·out/t, :]
//                         and those entries of b; it reads the whole x and writes its slice of y.
//   RowParallelLinear     W by columns (input features): rank r holds W[:, r·in/t : (r+1)·in/t]
//                         and reads its slice of x; the partial products are summed over the
//                         group, then the whole b (the same on every rank) is added.
//
// A column layer followed by a row layer (an MLP: c_fc then c_proj; attention: c_attn then
// c_proj, heads split) communicates once each way: an all-reduce of the output in forward (g)
// and of the input's gradient in backward (f), with nothing between them. Each layer is made
// either from a whole nn::Linear (its slice is copied: what one device holds, cut up) or new,
// by drawing the whole weight as nn::Linear would and keeping the slice, so that a seed gives the
// same function at every tensor-parallel size (Megatron's _initialize_affine_weight_cpu).
#pragma once

#include <tandem/nn/linear.h>
#include <tandem/parallel/placement.h>
#include <tandem/parallel/tp/regions.h>

namespace tandem::parallel::tp {

struct ColumnParallelOptions {
  bool gather_output = false;  // all-gather y: every rank gets all of it (off inside a region)
  // out_features is `stride` equal blocks, each split t ways, rank r keeping the r-th slice of
  // every block (Megatron's partition stride): c_attn's q | k | v is 3 blocks, so each rank gets
  // the q, k and v of the same heads.
  int64_t stride = 1;
  // The input is this rank's positions of the sequence [B, T/t, in] (sequence parallelism): it is
  // all-gathered (reduce-scattered in backward) instead of copied in (f).
  bool sequence_parallel = false;
  // Where the layer records its cut (Shard along "tp" of the weight and bias). Null: only
  // placement.h's registry, from which a wrapper's table adopts it.
  PlacementTable* placements = nullptr;
};

struct ColumnParallelLinear : nn::Module {
  ColumnParallelLinear(int64_t in_features, int64_t out_features, Group group,
                       nn::LinearOptions linear = {}, ColumnParallelOptions options = {});
  /// Rank group->rank()'s rows of `whole`, copied.
  ColumnParallelLinear(const nn::Linear& whole, Group group, ColumnParallelOptions options = {});

  int64_t in_features, out_features;  // of the whole layer
  Group group;
  ColumnParallelOptions options;
  Tensor weight;  // [out_features / t, in_features]
  Tensor bias;    // [out_features / t], undefined without bias

  /// x [*, in_features] (the whole of it, on every rank) -> [*, out_features / t] (this rank's
  /// slice), or [*, out_features] with gather_output.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
  std::string extra_repr() const override;
};

struct RowParallelOptions {
  bool input_is_parallel = true;  // x is already this rank's slice (after a column layer)
  // The output is reduce-scattered along the sequence, [B, T/t, out], instead of all-reduced.
  bool sequence_parallel = false;
  // Where the layer records its cut (the weight's Shard along "tp"). Null: only placement.h's
  // registry, from which a wrapper's table adopts it.
  PlacementTable* placements = nullptr;
};

struct RowParallelLinear : nn::Module {
  RowParallelLinear(int64_t in_features, int64_t out_features, Group group,
                    nn::LinearOptions linear = {}, RowParallelOptions options = {});
  /// Rank group->rank()'s columns of `whole`, and its whole bias, copied.
  RowParallelLinear(const nn::Linear& whole, Group group, RowParallelOptions options = {});

  int64_t in_features, out_features;  // of the whole layer
  Group group;
  RowParallelOptions options;
  Tensor weight;  // [out_features, in_features / t]
  Tensor bias;    // [out_features], the same on every rank; undefined without bias

  /// x [*, in_features / t] (or [*, in_features] without input_is_parallel) -> [*, out_features],
  /// the same on every rank.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(nn::Visitor& v) override;
  std::string extra_repr() const override;
};

/// f then x·wᵀ + b as one op whose backward overlaps the all-reduce of x's gradient with the
/// weight's and bias's gradients (column_linear.cpp). ColumnParallelLinear's forward without
/// sequence parallelism.
Tensor column_parallel_linear(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Group& group);
/// With sequence parallelism: x is this rank's positions [B, T/t, in], all-gathered along the
/// sequence before the product; backward gathers them again (only they are saved: 1/t of the
/// input, as Megatron-LM) while dX is computed, and reduce-scatters dX while dW is computed.
Tensor sequence_parallel_column_linear(const Tensor& x, const Tensor& w, const Tensor& b,
                                       const Group& group);

}  // namespace tandem::parallel::tp
