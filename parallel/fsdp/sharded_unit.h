// parallel/fsdp/sharded_unit.h — one unit of fully_shard (FSDP2's "parameter group"): the
// parameters one module owns, each sharded on dim 0 across the ranks of a group, and the two
// collectives that move them — one flat all-gather to unshard them all, one flat reduce-scatter
// to hand each rank the averaged gradient of its shards.
//
// Sharding is torch.chunk's: a parameter of d rows gives each rank c = ceil(d / W) rows (rank r
// rows [r·c, min(d, (r+1)·c)), so the last ranks may hold fewer, or none). The collectives work on
// one flat buffer per rank of L = Σ c·(row length) elements, every rank's shards at the same
// offsets, padded with zeros where a rank holds fewer rows:
//
//   all-gather       [rank 0: p0 p1 … | rank 1: p0 p1 … | …]  (W·L)  → copy out each parameter
//   reduce-scatter   the same layout of the gradients          (W·L)  → this rank's L, averaged
//
// Where the group can (host tensors: reduce_scatter_coalesced, all_gather_in_place), that
// layout is not a buffer but a list of slices of the whole tensors, [rank 0: p0's rows of rank 0,
// p1's, … | rank 1: …]: each whole parameter is allocated with W·c rows (its padding rows after
// the real ones, never seen), the peers' rows gathered straight into it, and each gradient
// reduced where backward left it (copied only where its rows do not divide by W). Elsewhere
// (NCCL, Gloo) the flat buffers are packed and unpacked by copies.
//
// The whole parameters exist only between an all-gather and the following reshard(); the
// optimizer sees the shards, which are leaves, and never the whole tensors.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tandem::parallel {

class ShardedUnit : public std::enable_shared_from_this<ShardedUnit> {
 public:
  /// `params`: the whole tensors (the same on every rank). `param_dtype`: the dtype the unit is
  /// all-gathered and computed in (default: the parameters'); `reduce_dtype`: the gradients'
  /// reduce-scatter dtype (default: the parameters').
  ShardedUnit(std::string name, const std::vector<Tensor>& params,
              std::vector<std::string> param_names, std::shared_ptr<Communicator> group,
              std::optional<DType> param_dtype, std::optional<DType> reduce_dtype);

  const std::string& name() const { return name_; }
  size_t size() const { return shards_.size(); }
  /// The shards this rank trains (leaves; [rows on this rank, ...]).
  const std::vector<Tensor>& shards() const { return shards_; }
  const std::vector<std::string>& names() const { return names_; }
  /// Whole shape of parameter i.
  const Shape& shape(size_t i) const { return layout_[i].shape; }
  /// Elements in this rank's flat buffer (with padding); W times it travel per collective.
  int64_t flat_size() const { return flat_; }

  // ---- unshard ----
  /// Starts the all-gather (nothing if it is in flight or done).
  void start_gather();
  /// Waits for it and makes the whole parameters. With `record`, each is the output of an op
  /// whose backward hands its gradient to add_gradient (when grad mode is on and the shard
  /// requires grad); without, plain tensors (for a backward recompute).
  void finish_gather(bool record);
  bool gathered() const { return !full_.empty(); }
  /// Whole parameter i (finish_gather first).
  const Tensor& full(size_t i) const { return full_[i]; }
  /// Whether `t` lives in one of the whole parameters' storage; its index if so.
  std::optional<size_t> owner_of(const Tensor& t) const;
  /// Lets go of the whole parameters (what the graph holds of them is gathered again), and of an
  /// all-gather still in flight (a prefetch no backward used), which would hold old values.
  void reshard();

  // ---- gradients ----
  /// Called (on backward's thread) when add_gradient completes the unit.
  std::function<void()> on_complete;
  /// Called with the whole gradient of parameter i from backward: kept (summed over backward
  /// passes until a reduce-scatter, so that no_sync accumulates). Returns true once every
  /// parameter gathered with `record` has had its gradient in this iteration.
  bool add_gradient(size_t i, const Tensor& grad);
  /// Recorded unshard ops whose gradient has not arrived (0 when the unit is complete).
  int pending() const { return pending_; }
  /// Whether the unit recorded unshard ops this iteration (took part in the graph).
  bool recorded() const { return recorded_ > 0; }
  /// Starts the mean reduce-scatter of the flat gradients (zeros where none arrived).
  void start_reduce_scatter();
  bool reducing() const { return reduce_work_ != nullptr; }
  /// Waits for it and adds each shard's part into the shard's .grad.
  void finish_reduce_scatter();
  /// Forgets this iteration's counts (after the end of backward).
  void end_iteration() {
    pending_ = 0;
    recorded_ = 0;
  }
  /// After a backward that failed part-way: waits out its reduce-scatter, ignoring its error,
  /// and drops the gradients gathered so far.
  void abandon_gradients();

 private:
  struct Layout {
    Shape shape;        // whole
    int64_t rows = 0;   // dim 0 (1 for a scalar)
    int64_t chunk = 0;  // rows per rank, ceil(rows / W)
    int64_t row = 0;    // elements per row
    int64_t at = 0;     // where its shard starts in a rank's flat buffer
    int64_t rows_of(int64_t rank) const {
      return std::max<int64_t>(0, std::min(chunk, rows - rank * chunk));
    }
  };
  // values (one per shard) -> this rank's flat buffer [L] in `dtype`, zeros where padded.
  Tensor flat_of(const std::vector<Tensor>& values, DType dtype) const;
  // Parameter i's whole tensor from every rank's flat buffers [W·L].
  Tensor whole_from(const Tensor& all, size_t i) const;
  // The flat layout as slices of `padded` (one per parameter, [W·c·row]): rank-major.
  std::vector<Tensor> rank_major(const std::vector<Tensor>& padded) const;
  // Parameter i's gradient as [W·c·row] (zeros where padded, or where none arrived).
  Tensor padded_gradient(size_t i) const;

  std::string name_;
  std::vector<std::string> names_;
  std::vector<Layout> layout_;
  std::vector<Tensor> shards_;
  std::vector<Tensor> full_;
  int64_t flat_ = 0;
  std::shared_ptr<Communicator> group_;
  DType param_dtype_, reduce_dtype_, shard_dtype_;
  bool in_place_ = true;  // until the group declines an in-place collective
  // In flight.
  Tensor gathered_;             // [W·L], packed
  std::vector<Tensor> padded_;  // in place: per parameter [W·c·row], the whole with its padding
  WorkPtr gather_work_;
  std::vector<Tensor> grads_;  // per parameter, in reduce_dtype: summed over this rank's passes
  Tensor reduced_;             // [L]: this rank's averaged part
  WorkPtr reduce_work_;
  std::mutex mutex_;  // add_gradient may run on a device's backward thread
  int pending_ = 0, recorded_ = 0;
};

}  // namespace tandem::parallel
