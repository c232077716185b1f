// parallel/fsdp/fsdp_state_dict.cpp — whole state dicts of a fully sharded model: gathered unit by
// unit (one unit's whole parameters at a time besides the result), and loaded by each rank taking
// its rows.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/fsdp/fsdp_state.h>
#include <map>
#include <sstream>

namespace tandem::parallel {

nn::StateDict FullyShardedModule::full_state_dict() {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  NoGradGuard no_grad;
  std::map<const TensorImpl*, Tensor> whole;  // shard -> its whole tensor
  for (auto& unit : s.units) {
    const bool was = unit->gathered();
    unit->finish_gather(false);
    for (size_t i = 0; i < unit->size(); ++i)
      whole[&unit->shards()[i].impl()] = unit->full(i).to(unit->shards()[i].dtype()).clone();
    if (!was) unit->reshard();
  }
  nn::StateDict out = model_.state_dict();
  for (auto& [name, t] : out)
    if (auto it = whole.find(&t.impl()); it != whole.end()) t = it->second;
  return out;
}

void FullyShardedModule::load_full_state_dict(const nn::StateDict& state, std::string_view source) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  NoGradGuard no_grad;
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::map<const TensorImpl*, std::pair<size_t, size_t>> shard_of;  // -> (unit, index)
  for (size_t u = 0; u < s.units.size(); ++u)
    for (size_t i = 0; i < s.units[u]->size(); ++i)
      shard_of[&s.units[u]->shards()[i].impl()] = {u, i};
  std::ostringstream problems;
  const int64_t world = s.group->size(), rank = s.group->rank();
  nn::StateDict mine = model_.state_dict();
  for (auto& [name, t] : mine) {
    auto it = given.find(name);
    if (it == given.end()) {
      problems << "\n  missing: " << name;
      continue;
    }
    const Tensor& src = *it->second;
    given.erase(it);
    auto sh = shard_of.find(&t.impl());
    const Shape& want =
        sh == shard_of.end() ? t.shape() : s.units[sh->second.first]->shape(sh->second.second);
    if (src.shape() != want) {
      problems << "\n  " << name << ": " << src.shape() << " given, " << want << " expected";
      continue;
    }
    if (sh == shard_of.end()) {
      t.copy_(src);
      continue;
    }
    // This rank's rows, as the unit cut them (torch.chunk's ceil(rows / W) per rank).
    const int64_t rows = src.dim() == 0 ? 1 : src.size(0);
    const int64_t chunk = (rows + world - 1) / world;
    const int64_t n = t.dim() == 0 ? 1 : t.size(0);
    if (n > 0) t.copy_(src.reshape({rows, -1}).narrow(0, rank * chunk, n).reshape(t.shape()));
  }
  for (const auto& [name, t] : given) problems << "\n  unexpected: " << name;
  const std::string p = problems.str();
  TD_CHECK_VALUE(p.empty(), "FullyShardedModule::load_full_state_dict",
                 source.empty() ? std::string() : " (" + std::string(source) + ")",
                 ": the state dict does not fit the model:", p);
}

}  // namespace tandem::parallel
