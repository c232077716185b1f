// parallel/held_parts.cpp — listing the parts a rank gives, with their placements as JSON.
#include <tandem/core/check.h>
#include <tandem/parallel/held_parts.h>
#include <tandem/parallel/sharded_checkpoint_index.h>

namespace tandem::parallel {
using nlohmann::json;

bool gives(const PlacedTensor& e, const PlacementTable& table) {
  if (!e.counted) return false;
  for (const PlacementTable::Dimension& d : table.dimensions()) {
    if (d.across == Across::Stages) continue;  // each stage holds its own tensors
    const Placement p = e.along(d.name);
    const bool divided = std::holds_alternative<Shard>(p) || std::holds_alternative<Piece>(p);
    if (!divided && d.group->rank() != 0) return false;
  }
  return true;
}

void HeldParts::add(const std::string& key, const Tensor& t, const Shape& whole,
                    const json& placements) {
  if (parts.contains(key)) return;  // a scalar state every piece of a parameter has
  parts[key] = {{"shape", whole},
                {"dtype", std::string(name(t.dtype()))},
                {"placements", placements},
                {"elements", t.numel()}};
  if (t.numel() > 0) tensors.emplace_back(key, t);
}

namespace {

// `value(e)` of every entry this rank gives, as "<prefix><name>", cut as the entry is.
template <typename Value>
void add_entries(HeldParts& w, const PlacementTable& table, const std::string& prefix,
                 Value&& value, std::string_view by) {
  for (const PlacedTensor& e : table.entries()) {
    TD_CHECK_VALUE(!e.name.empty(), by, ": a ", e.local.shape(),
                   " tensor of the placement table has no name; record it with its name in one "
                   "device's model");
    if (gives(e, table))
      w.add(prefix + e.name, value(e), e.whole,
            sharded_index::to_json(applied_placements(e, table)));
  }
}

}  // namespace

HeldParts held_parts(const PlacementTable& table, const nn::StateDict& buffers,
                     const optim::Optimizer* optimizer, std::string_view by) {
  using sharded_index::to_json;
  HeldParts w;
  add_entries(
      w, table, "model.", [](const PlacedTensor& e) { return e.local; }, by);
  if (gives(PlacedTensor{}, table))  // a replicated tensor's giver
    for (const auto& [name, b] : buffers) w.add("model." + name, b, b.shape(), json::array());
  if (optimizer == nullptr) return w;
  const optim::OptimizerState state = optimizer->state_dict();
  const std::vector<Tensor> params = optimizer->parameters();
  for (size_t at = 0; at < state.tensors.size(); ++at) {
    const auto& [key, t] = state.tensors[at];
    size_t j;
    std::string what;
    if (!optim::parse_state_key(key, j, what)) continue;
    const PlacedTensor* e = j < params.size() ? table.find(params[j]) : nullptr;
    TD_CHECK_VALUE(e != nullptr, by, ": the optimizer's parameter ", j,
                   " is not in the placement table (", table.str(),
                   "); give the optimizer over the table's tensors (under ZeRO its inner())");
    if (!gives(*e, table)) continue;
    // Shaped like the rank's tensor (Adam's moments): cut as it is. Else a scalar (Adam's step).
    const bool per_element = t.dim() > 0 && t.shape() == e->local.shape();
    const std::string k = "optim." + e->name + "." + what;
    w.add(k, t, per_element ? e->whole : t.shape(),
          per_element ? to_json(applied_placements(*e, table)) : json::array());
    w.parts[k]["param"] = e->name;
    w.parts[k]["state"] = what;
    w.parts[k]["per_element"] = per_element;
    w.parts[k]["order"] = at;  // where the optimizer lists it: step before exp_avg, say
  }
  return w;
}

HeldParts held_gradients(const PlacementTable& table, std::string_view by) {
  HeldParts w;
  add_entries(
      w, table, "grad.",
      [](const PlacedTensor& e) {
        return e.local.grad().defined() ? e.local.grad() : zeros_like(e.local);
      },
      by);
  return w;
}

int64_t ranks_of(const PlacementTable& table) {
  int64_t n = 1;
  for (const PlacementTable::Dimension& d : table.dimensions()) n *= d.group->size();
  return n;
}

}  // namespace tandem::parallel
