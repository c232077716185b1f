// parallel/fsdp/fsdp_state_dict.cpp — whole state dicts of a fully sharded model: gathered unit by
// unit (one unit's whole parameters at a time besides the result), and loaded by each rank taking
// its rows.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/fsdp/fsdp_state.h>
#include <algorithm>
#include <map>
#include <sstream>

namespace tandem::parallel {

namespace {

using ShardIndex = std::map<const TensorImpl*, std::pair<size_t, size_t>>;

// Each shard -> (its unit, its index there).
ShardIndex index_shards(const FullyShardedModule::State& s) {
  ShardIndex out;
  for (size_t u = 0; u < s.units.size(); ++u)
    for (size_t i = 0; i < s.units[u]->size(); ++i) out[&s.units[u]->shards()[i].impl()] = {u, i};
  return out;
}

}  // namespace

nn::StateDict FullyShardedModule::full_state_dict(bool rank0_only) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  NoGradGuard no_grad;
  const bool keep = !rank0_only || s.group->rank() == 0;
  std::map<const TensorImpl*, Tensor> whole;  // shard -> its whole tensor
  for (auto& unit : s.units) {
    const bool was = unit->gathered();
    unit->finish_gather(false);
    for (size_t i = 0; keep && i < unit->size(); ++i)
      whole[&unit->shards()[i].impl()] = unit->full(i).to(unit->shards()[i].dtype()).clone();
    if (!was) unit->reshard();
  }
  if (!keep) return {};
  nn::StateDict out = model_->state_dict();
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
  const ShardIndex shard_of = index_shards(s);
  std::ostringstream problems;
  nn::StateDict mine = model_->state_dict();
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
    t.copy_(s.units[sh->second.first]->rows_of(sh->second.second, src));
  }
  for (const auto& [name, t] : given) problems << "\n  unexpected: " << name;
  const std::string p = problems.str();
  TD_CHECK_VALUE(p.empty(), "FullyShardedModule::load_full_state_dict",
                 source.empty() ? std::string() : " (" + std::string(source) + ")",
                 ": the state dict does not fit the model:", p);
}

namespace {

// The optimizer's parameters (shards) -> (unit, index); ValueError for one that is not a shard.
std::vector<std::pair<size_t, size_t>> locate(const FullyShardedModule::State& s,
                                              const optim::Optimizer& optimizer) {
  const ShardIndex shard_of = index_shards(s);
  std::vector<std::pair<size_t, size_t>> out;
  for (const Tensor& p : optimizer.parameters()) {
    auto it = shard_of.find(&p.impl());
    TD_CHECK_VALUE(it != shard_of.end(), "FullyShardedModule: the optimizer's parameter ",
                   out.size(), " (", p.shape(),
                   ") is not one of this module's shards\n  hint: "
                   "make the optimizer over the FullyShardedModule's parameters()");
    out.push_back(it->second);
  }
  return out;
}

}  // namespace

optim::OptimizerState FullyShardedModule::full_optimizer_state_dict(
    const optim::Optimizer& optimizer, bool rank0_only) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  const auto where = locate(s, optimizer);
  optim::OptimizerState mine = optimizer.state_dict();
  // Per unit and state name, the values of its shards (undefined: a shard without that state).
  std::map<std::pair<size_t, std::string>, std::vector<Tensor>> values;
  std::vector<std::string> names;  // in first-seen order, so that every rank gathers alike
  for (const auto& [key, t] : mine.tensors) {
    size_t j;
    std::string name;
    if (!optim::parse_state_key(key, j, name) || t.dim() == 0) continue;
    auto [u, i] = where.at(j);
    auto& v = values[{u, name}];
    v.resize(s.units[u]->size());
    v[i] = t;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::map<std::pair<size_t, std::string>, std::vector<Tensor>> whole;
  for (size_t u = 0; u < s.units.size(); ++u)
    for (const std::string& name : names) {
      auto it = values.find({u, name});
      if (it == values.end()) continue;
      std::vector<Tensor> gathered = s.units[u]->gather_whole(it->second);
      if (!rank0_only || s.group->rank() == 0) whole[{u, name}] = std::move(gathered);
    }
  if (rank0_only && s.group->rank() != 0) return {};
  for (auto& [key, t] : mine.tensors) {
    size_t j;
    std::string name;
    if (!optim::parse_state_key(key, j, name) || t.dim() == 0) continue;
    auto [u, i] = where.at(j);
    t = whole.at({u, name})[i];
  }
  return mine;
}

void FullyShardedModule::load_full_optimizer_state_dict(optim::Optimizer& optimizer,
                                                        const optim::OptimizerState& state) {
  State& s = *state_;
  std::lock_guard lk(s.mutex);
  const auto where = locate(s, optimizer);
  optim::OptimizerState mine = state;
  for (auto& [key, t] : mine.tensors) {
    size_t j;
    std::string name;
    if (!optim::parse_state_key(key, j, name) || t.dim() == 0) continue;
    TD_CHECK_VALUE(j < where.size(), "FullyShardedModule: optimizer state key '", key,
                   "' names parameter ", j, ", but the optimizer has ", where.size());
    auto [u, i] = where[j];
    TD_CHECK_VALUE(t.shape() == s.units[u]->shape(i), "FullyShardedModule: optimizer state '", key,
                   "' is ", t.shape(), ", its parameter ", s.units[u]->shape(i));
    t = s.units[u]->rows_of(i, t);
  }
  optimizer.load_state_dict(mine);
}

}  // namespace tandem::parallel
