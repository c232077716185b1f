// parallel/ddp/zero_shards.h — ZeRO stages 1 and 2 (DeepSpeed's names; PyTorch's
// ZeroRedundancyOptimizer is stage 1): which part of each DDP bucket this rank owns, and the
// three collectives that replace DDP's all-reduce.
//
// Each bucket of n gradient elements is padded with zeros to a multiple of the world size W, so
// that every rank owns the same length c = ceil(n / W): rank r owns elements [r·c, (r+1)·c). (The
// padding is explicit: llm.c instead falls back to an unsharded path when n % W != 0.) Then, per
// step:
//   backward   reduce-scatter each bucket (mean): rank r receives the average of its c elements
//              (half an all-reduce's bytes);
//   step       the optimizer updates only those elements, keeping Adam's moments for them alone;
//   gather     all-gather each bucket's updated parameters (the other half): every rank again
//              holds the whole model for the next forward.
// So ZeRO sends what DDP sends, and each rank keeps optimizer state for 1/W of the parameters.
//
// The elements a rank owns are seen by its optimizer as "pieces": a parameter cut by a chunk
// boundary gives one piece per rank, each a 1-D view of the parameter's own storage, so an update
// of the piece is an update of the parameter, and an element-wise optimizer (SGD, Adam, AdamW) does
// to the pieces exactly what it would do to the whole. Parameter groups keep their options.
//
// Stage 1 keeps every bucket's flat gradient buffer between steps (DDP's 4 bytes per parameter in
// float32), this rank's averaged chunk in place in it; stage 2 keeps only the averaged chunk,
// reducing the gradients where they lie (host tensors) or through a buffer allocated when the
// bucket's first gradient arrives (a GPU's), freed, like the gradients, once the bucket is
// reduced. In both, a parameter's .grad is freed as soon as its bucket takes it.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <string>
#include <vector>

namespace tandem::parallel {

class ZeroShards {
 public:
  /// `buckets`: parameter indices per bucket, in buffer order (the reducer's plan).
  ZeroShards(int stage, std::vector<Tensor> params, std::vector<std::string> names,
             const std::vector<std::vector<size_t>>& buckets, std::shared_ptr<Communicator> group);

  int stage() const { return stage_; }
  /// The module's parameters that DDP reduces, in the reducer's order.
  const std::vector<Tensor>& parameters() const { return params_; }
  Communicator& group() { return *group_; }
  /// Bucket b's length with padding: a multiple of the world size.
  int64_t padded_size(size_t bucket) const { return chunk_[bucket] * group_->size(); }

  // ---- backward (the reducer) ----
  /// Starts the mean reduce-scatter of bucket b's padded flat gradients into this rank's chunk.
  /// Stage 1 reduces in the buffer's own chunk where the group can (reduce_scatter_coalesced).
  WorkPtr reduce_scatter(size_t bucket, const Tensor& buffer);
  /// Stage 2: the same from the gradients where they lie (bucket b's, in its order, each whole;
  /// zeros for a parameter without one), with no buffer. Null where the group cannot (a GPU's):
  /// the caller then packs them into a buffer for reduce_scatter().
  WorkPtr reduce_scatter_gradients(size_t bucket, std::vector<Tensor>& grads);
  /// After every bucket's reduce-scatter completed: each piece's .grad is its part of the chunk.
  /// `used` (find_unused_parameters; undefined otherwise): float32 [params] on the host, 0 for a
  /// parameter that got a gradient on no rank; its pieces get none.
  void publish_gradients(const Tensor& used);

  // ---- the optimizer (zero_optimizer.h) ----
  /// This rank's pieces of `params` (in their order; a parameter this rank owns no element of has
  /// none). ValueError naming a tensor that is not one of the module's parameters.
  std::vector<Tensor> pieces_of(const std::vector<Tensor>& params) const;
  /// All-gathers every bucket's parameters: each rank's updated pieces reach every rank,
  /// straight into the parameters where the group can (all_gather_in_place).
  void gather_parameters();
  /// Bucket b's padded flat tensor of every rank's chunk, this rank's chunk made of `values`
  /// (one per piece of piece_list(), each [len] or undefined for zeros; those of other buckets are
  /// not read). Collective. How optimizer state is gathered into whole tensors.
  Tensor all_gather_bucket(size_t bucket, const std::vector<Tensor>& values);
  struct Piece {
    size_t param;  // index into parameters()
    size_t bucket;
    int64_t at;   // where the piece starts in this rank's chunk of the bucket
    int64_t lo;   // where it starts in the parameter (flattened)
    int64_t len;  // elements
    Tensor view;  // [len], a view of the parameter's storage, a leaf that requires grad
  };
  const std::vector<Piece>& piece_list() const { return pieces_; }
  /// Parameter i's piece on this rank (an index into piece_list()), or -1.
  int piece_of(size_t param) const { return piece_of_[param]; }
  /// The index of `param` in parameters(); ValueError if it is not one of them.
  size_t index_of(const Tensor& param) const;
  size_t bucket_count() const { return buckets_.size(); }
  const std::vector<size_t>& bucket(size_t b) const { return buckets_[b]; }
  /// Where parameter i starts in its bucket.
  int64_t offset(size_t param) const { return offsets_[param]; }

 private:
  struct Gather {  // one bucket's all-gather in flight
    size_t bucket;
    Tensor flat;                  // [padded]: every rank's chunk, in rank order
    std::vector<Tensor> outputs;  // views of flat, one per rank
    WorkPtr work;
  };
  Gather start_gather(size_t bucket, const std::vector<Tensor>& values);
  void gather_through_buffers();  // gather_parameters() where the group has no in-place gather

  int stage_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<int64_t> offsets_;       // param -> where it starts in its bucket
  std::vector<int64_t> chunk_;         // bucket -> elements each rank owns
  std::vector<Tensor> grad_chunk_;     // bucket -> this rank's averaged gradients [chunk]
  std::vector<Tensor> bucket_buffer_;  // stage 1, during a step: the reducer's bucket buffers
  std::vector<Piece> pieces_;
  std::vector<int> piece_of_;  // param -> index into pieces_, or -1
  std::shared_ptr<Communicator> group_;
};

}  // namespace tandem::parallel
