// parallel/placement.h — how each tensor this rank trains lies in the whole model: placement as
// data, written by every wrapper as it cuts and read by every generic operation (the gradient
// norm, the partial-gradient reduction). PyTorch's DTensor carries the same facts on the tensor
// (Replicate, Shard(dim), Partial) and Megatron-LM writes them as attributes on the parameter
// (set_tensor_model_parallel_attributes); Tandem keeps them in a table the wrappers share, so that
// nothing below parallel/ learns a parallel concept.
//
// One parameter under tensor parallelism (t = 2, "tp") and then fully_shard (W = 2, "dp"): TP
// keeps rank-ordered rows of each of c_attn's q, k, v blocks; FSDP chunks that slice's rows.
//
//     whole [3C, C]                     tp rank 0 [3C/2, C]           dp rank 0 of it [3C/4, C]
//     ┌────────────┐                    ┌────────────┐                ┌────────────┐
//     │ q  tp0 rows│──┐                 │ q  tp0     │                │ q  tp0     │
//     │    tp1 rows│  │  tp: Shard      │ k  tp0     │  dp: Shard     │ k  tp0, ½  │
//     │ k  tp0 rows│──┼─ dim 0, ──────▶ │ v  tp0     │ ─ dim 0 ─────▶ └────────────┘
//     │    tp1 rows│  │  3 blocks       └────────────┘   (row chunks)
//     │ v  tp0 rows│──┘
//     │    tp1 rows│
//     └────────────┘
//   its record: name "h.0.attn.c_attn.weight", whole [3C, C],
//               placements [tp: Shard{dim 0, blocks 3}, dp: Shard{dim 0, blocks 1, padding 0}]
//
// Placements are listed in the order the wrappers applied them: to put a whole tensor back
// together, undo them last first. A mesh dimension an entry does not name is Replicate there.
#pragma once

#include <tandem/nn/module.h>
#include <tandem/parallel/comm/communicator.h>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace tandem::parallel {

/// Every rank of the dimension holds the same tensor.
struct Replicate {};
/// Each rank holds its slice along `dim`: the whole (with `padding` zero rows at its end) is cut
/// into `blocks` equal blocks, each split in rank order (TP's c_attn: 3 blocks, q | k | v; FSDP's
/// row chunk: 1 block, padded to a multiple of the ranks).
struct Shard {
  int64_t dim = 0;
  int64_t blocks = 1;
  int64_t padding = 0;
};
/// The tensor is replicated, but each rank's gradient is only a summand of the whole one until
/// it is reduced (sequence parallelism's LayerNorms, wpe and row biases: each saw T/t positions).
struct Partial {};
/// This rank holds the elements [begin, begin + length) of the flattened tensor the placements
/// before it leave (the whole, or a TP slice of it): a ZeRO piece,
/// where a bucket's equal chunks cut parameters at arbitrary elements.
struct Piece {
  int64_t begin = 0;
  int64_t length = 0;
};
using Placement = std::variant<Replicate, Shard, Partial, Piece>;

/// "Shard(dim 0, 3 blocks)", "Piece[12, 40)", ...
std::string to_string(const Placement& p);

/// One tensor this rank trains: what it is a part of, and how.
struct PlacedTensor {
  Tensor local;      // this rank's tensor: a parameter field, a shard, a piece view
  std::string name;  // the whole tensor's name in one device's model (a tied one's first name)
  Shape whole;       // the whole tensor's shape (a padded token table's rows included)
  std::vector<std::pair<std::string, Placement>> placements;  // mesh dimension -> how, in order
  /// False for a copy of a tensor another rank counts: a tied weight's second copy on a
  /// pipeline's last stage (Megatron's shared embedding), kept equal by summed gradients.
  bool counted = true;

  /// Its placement along `dim` (Replicate when it names none).
  Placement along(const std::string& dim) const;
};

/// How the ranks along one mesh dimension divide the tensors.
enum class Across {
  Placements,  // every rank holds the same tensors, each placed as its entry says
  Stages,      // each rank holds different tensors (a pipeline's stages)
};

/// The tensors this rank trains — every one of them, as the wrappers applied so far left them —
/// and the mesh dimensions their placements name. Shared by the wrappers (TP's plan, fully_shard,
/// DDP's ZeRO, the pipelines): each records what it cuts as it cuts.
class PlacementTable {
 public:
  /// Names a mesh dimension and this rank's group along it. Adding a name again checks that the
  /// group is the same size (two wrappers over one dimension).
  void add_dimension(const std::string& name, std::shared_ptr<Communicator> group,
                     Across across = Across::Placements);
  bool has_dimension(const std::string& name) const;
  Communicator& group(const std::string& name) const;

  /// The entry of `local`, added if it has none: as another table placed it (a TP model given to
  /// fully_shard with a table of its own: FSDP2 reads TP's placement off the parameter), else
  /// Replicate everywhere, named `name`.
  PlacedTensor& record(const Tensor& local, const std::string& name = "");
  /// `local`'s entry, or null.
  const PlacedTensor* find(const Tensor& local) const;
  /// `local`'s name in one device's model: its entry's, or, for a tensor whose entry a wrapper
  /// replaced or dropped (ZeRO trains a parameter in pieces, or not here), the name the entry
  /// had; empty when the table never held it.
  std::string name_of(const Tensor& local) const;
  /// Records `local` as placed `p` along `dim` (after any placement it already has).
  void place(const Tensor& local, const std::string& dim, Placement p);
  /// What a layer that keeps a part of a whole tensor records: the dimension (with its group),
  /// the whole's shape, and how `part` lies along it.
  void cut(const Tensor& part, const Shape& whole, const std::string& dim,
           std::shared_ptr<Communicator> group, Placement p);
  /// A wrapper that trains `part` in place of `local` (a shard, a piece): `part` inherits
  /// `local`'s entry, then is placed `p` along `dim`. `local`'s own entry goes unless `keep`.
  void replace(const Tensor& local, const Tensor& part, const std::string& dim, Placement p,
               bool keep = false);
  /// `local` is no longer trained on this rank (ZeRO: it owns no piece of it).
  void drop(const Tensor& local);
  /// This rank now trains exactly `tensors` (a pipeline stage): entries of others go, missing
  /// ones are added as Replicate.
  void keep_only(const std::vector<std::pair<std::string, Tensor>>& tensors);
  /// Module::to makes new tensors: each entry whose tensor is before[i] now records after[i].
  void follow(const std::vector<Tensor>& before, const std::vector<Tensor>& after);
  /// ValueError naming the first entry whose tensor nothing but the table holds any more: the
  /// model was moved (Module::to) after its cuts were recorded, so its gradients are not here.
  /// The generic operations call it before reading gradients.
  void check_held(std::string_view by) const;

  const std::vector<PlacedTensor>& entries() const { return entries_; }
  /// Every entry's local tensor, in order (what an optimizer over this rank's part holds).
  std::vector<Tensor> tensors() const;
  /// Along `dim`, whether the ranks hold different parts (a tensor was placed Shard or Piece
  /// along it, or it is a pipeline's stages): then a sum over the whole model needs its group.
  bool divides(const std::string& dim) const;
  /// This rank's coordinates along the dimensions whose ranks hold different tensors (a
  /// pipeline's stages), in the order added: empty without a pipeline.
  std::vector<int64_t> stage() const;
  /// The same for one tensor, by its one-device name: where a pipeline rank holds several stages
  /// (interleaved, V schedules), the pipeline records each name's own stage of the model, so
  /// that the whole state comes out in one device's order; other names: stage().
  std::vector<int64_t> stage(const std::string& name) const;
  void set_stage(const std::string& name, int64_t stage) { stage_of_name_.emplace(name, stage); }
  /// "31 tensors, tp (2 ranks, divides); dp (2 ranks)", for errors and `describe`.
  std::string str() const;

  struct Dimension {
    std::string name;
    std::shared_ptr<Communicator> group;
    Across across;
    bool divided;  // some tensor was placed Shard or Piece along it
  };
  const std::vector<Dimension>& dimensions() const { return dims_; }

 private:
  size_t index_of(const Tensor& local) const;  // entries_.size() when absent
  // Every placement written is remembered by tensor (placement.cpp's registry), so that a table
  // that meets the tensor later adopts it instead of counting a slice as whole.
  void note(const PlacedTensor& e) const;
  void adopt(PlacedTensor& e);
  // A new entry for `local`: another table's record of it, else Replicate everywhere.
  PlacedTensor fresh(const Tensor& local, const std::string& name);

  std::vector<Dimension> dims_;
  std::map<std::string, int64_t> stage_of_name_;  // set_stage's: the first stage holding it
  std::vector<PlacedTensor> entries_;
  // The tensors of entries replaced or dropped, with their names; weak: a whole tensor that
  // fully_shard let go must not stay alive here.
  std::vector<std::pair<std::weak_ptr<TensorImpl>, std::string>> former_;
};

/// model.to(device), the table's entries following the model's tensors to their new ones: how to
/// move a model after a wrapper recorded its cuts (tensor_parallel_gpt, a pipeline's stage).
void move_to(nn::Module& model, Device device, PlacementTable& table);

}  // namespace tandem::parallel
