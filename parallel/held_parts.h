// parallel/held_parts.h — what one rank gives of the whole model's state: each tensor it is the
// one to give (along a dimension whose ranks hold the same tensor, the rank at coordinate 0; a
// tied copy another stage counts, nobody), keyed by one device's names, with the placements that
// cut it. A sharded checkpoint writes a rank's parts to its file (sharded_checkpoint.h); a whole
// state dict sends them to one rank, which puts them together (whole_state.h).
//
//   "model.<name>"          a parameter (or buffer) this rank gives, as it holds it
//   "optim.<name>.<state>"  its optimizer state: shaped like it (Adam's moments: cut alike) or
//                           not (Adam's step: the same for every part)
#pragma once

#include <tandem/core/serialize/safetensors.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/placed_elements.h>
#include <nlohmann/json.hpp>
#include <string_view>

namespace tandem::parallel {

/// Whether this rank gives `e`: along each dimension where the ranks hold the same tensor
/// (Replicate, Partial), only the rank at coordinate 0 does; a tied copy another stage counts,
/// none; each stage gives its own tensors.
bool gives(const PlacedTensor& e, const PlacementTable& table);

struct HeldParts {
  NamedTensorList tensors;  // the parts with elements, in the order added
  // key -> {"shape": the whole's, "dtype", "placements" (placed_elements' chain as JSON),
  // "elements"; an optimizer state's also "param", "state", "per_element" and "order", its
  // place in the optimizer's state_dict}
  nlohmann::json parts = nlohmann::json::object();

  void add(const std::string& key, const Tensor& t, const Shape& whole,
           const nlohmann::json& placements);
};

/// This rank's parts: the table's tensors it gives, the model's `buffers` (replicated: given by
/// the ranks at coordinate 0), and the state of `optimizer` (null: none), an optimizer over the
/// table's tensors. ValueError, naming `by`, for an entry without a name or an optimizer
/// parameter the table does not hold.
HeldParts held_parts(const PlacementTable& table, const nn::StateDict& buffers,
                     const optim::Optimizer* optimizer, std::string_view by);

/// The same for the gradients of the table's tensors ("grad.<name>", zeros where a tensor has
/// none), cut as the tensors are.
HeldParts held_gradients(const PlacementTable& table, std::string_view by);

/// The product of the table's dimensions' sizes: the ranks whose parts make the whole model.
int64_t ranks_of(const PlacementTable& table);

}  // namespace tandem::parallel
