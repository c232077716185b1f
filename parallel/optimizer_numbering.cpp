// parallel/optimizer_numbering.cpp — every rank's (group, stage, place) of each parameter, put
// together and sorted.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/optimizer_numbering.h>
#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

namespace tandem::parallel {
using nlohmann::json;
namespace {

// {"groups": n, "params": [[name, group, stage, place], ...]}: what this rank knows (a name's
// stage: its pipeline stage, placement.h's stage(name)).
json this_ranks_part(const PlacementTable& table, nn::Module& model,
                     const optim::Optimizer& optimizer) {
  std::vector<std::string> order;  // the module's parameters by one device's names, in order
  for (const auto& [name, t] : model.named_parameters()) {
    const std::string whole = table.name_of(t);
    order.push_back(whole.empty() ? name : whole);
  }
  const json groups = json::parse(optimizer.state_dict().param_groups_json);
  const std::vector<Tensor> params = optimizer.parameters();
  json out = {{"groups", groups.size()}, {"params", json::array()}};
  for (size_t g = 0; g < groups.size(); ++g)
    for (const size_t i : groups[g].at("params").get<std::vector<size_t>>()) {
      const PlacedTensor* e = i < params.size() ? table.find(params[i]) : nullptr;
      TD_CHECK_VALUE(e != nullptr, "optimizer state: the optimizer's parameter ", i,
                     " is not in the placement table (", table.str(),
                     "); give the optimizer over the table's tensors (under ZeRO its inner())");
      if (!e->counted) continue;  // a tied copy: its first stage numbers it
      const auto at = std::find(order.begin(), order.end(), e->name);
      TD_CHECK_VALUE(at != order.end(), "optimizer state: the optimizer's parameter \"", e->name,
                     "\" is not a parameter of the model given");
      out["params"].push_back({e->name, g, table.stage(e->name), at - order.begin()});
    }
  return out;
}

}  // namespace

OptimizerNumbering number_parameters(const PlacementTable& table, nn::Module& model,
                                     const optim::Optimizer& optimizer, Communicator* world) {
  const std::string mine = this_ranks_part(table, model, optimizer).dump();
  const std::vector<std::string> texts =
      world ? all_gather_strings(*world, mine) : std::vector<std::string>{mine};
  using Key = std::tuple<size_t, std::vector<int64_t>, int64_t, std::string>;
  std::vector<Key> keys;
  std::map<std::string, std::pair<size_t, int>> group_of;  // name -> (group, first rank saying so)
  size_t groups = 0;
  for (size_t r = 0; r < texts.size(); ++r) {
    const json part = json::parse(texts[r]);
    const size_t n = part["groups"];
    TD_CHECK_VALUE(r == 0 || n == groups, "optimizer state: rank ", r, "'s optimizer has ", n,
                   " parameter groups, rank 0's ", groups,
                   ": make every rank's with every group, empty or not "
                   "(optim::adamw_groups(..., keep_empty_groups = true))");
    groups = n;
    for (const json& p : part["params"]) {
      const std::string name = p[0];
      const size_t g = p[1];
      const auto [it, fresh] = group_of.emplace(name, std::pair{g, int(r)});
      TD_CHECK_VALUE(it->second.first == g, "optimizer state: \"", name, "\" is in group ",
                     it->second.first, " on rank ", it->second.second, " and in group ", g,
                     " on rank ", r);
      if (fresh) keys.emplace_back(g, p[2].get<std::vector<int64_t>>(), p[3].get<int64_t>(), name);
    }
  }
  std::sort(keys.begin(), keys.end());
  OptimizerNumbering out;
  out.groups.resize(groups);
  for (const auto& [g, stage, place, name] : keys) {
    const int64_t j = int64_t(out.index.size());
    out.index.emplace(name, j);
    out.groups[g].push_back(j);
  }
  return out;
}

}  // namespace tandem::parallel
