// parallel/pipeline/pipeline_state.cpp — gathering the stages' tensors on stage 0, and the map
// between a stage's optimizer indices and one device's.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/pipeline/pipeline_state.h>
#include <tandem/parallel/pipeline/tensor_message.h>
#include <tandem/parallel/tp/model_state.h>
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tandem::parallel {
namespace {

// Every stage's named tensors on stage 0, stage by stage; a name stage 0 has already (a tied
// weight's second name) is kept once. Empty on the other stages.
nn::StateDict gather_on_first(DistributedPipeline& pipe, const nn::StateDict& mine) {
  Communicator& g = *pipe.group();
  const int k = g.rank();
  nn::StateDict out = k == 0 ? mine : nn::StateDict{};
  for (int s = 1; s < g.size(); ++s) {
    std::string names;
    if (k == s)
      for (const auto& [name, t] : mine) names += name + "\n";
    names = broadcast_string(g, names, s);
    if (k == s) {
      std::vector<WorkPtr> sends;
      for (const auto& [name, t] : mine) send_tensor(g, t, 0, sends);
      for (const WorkPtr& w : sends) w->wait();
    } else if (k == 0) {
      std::istringstream lines(names);
      for (std::string name; std::getline(lines, name);) {
        Tensor t = recv_tensor(g, s, pipe.device());
        const bool seen = std::any_of(out.begin(), out.end(),
                                      [&](const auto& entry) { return entry.first == name; });
        if (!seen) out.emplace_back(name, std::move(t));
      }
    }
  }
  return out;
}

// Each of this stage's optimizer parameters' index in one device's optimizer (by local index),
// and one device's indices of each group.
struct WholeIndices {
  std::vector<int64_t> of_local;
  std::vector<bool> copy;  // by local index: a tied copy another stage counts
  std::vector<std::vector<int64_t>> groups;
};

WholeIndices whole_indices(DistributedPipeline& pipe, const std::vector<Tensor>& params,
                           const std::string& groups_json) {
  const nlohmann::json groups = nlohmann::json::parse(groups_json);
  const std::vector<Tensor> copies = pipe.counted_elsewhere();
  WholeIndices out;
  for (const Tensor& p : params)
    out.copy.push_back(
        std::any_of(copies.begin(), copies.end(), [&](const Tensor& c) { return c.is_same(p); }));
  auto is_copy = [&](size_t i) { return bool(out.copy[i]); };
  const int64_t n_groups = int64_t(groups.size()), stages = pipe.stages();
  std::vector<Tensor> sizes;
  for (int64_t s = 0; s < stages; ++s)
    sizes.push_back(empty({1}, {.dtype = kInt64, .device = pipe.device()}));
  pipe.group()
      ->all_gather(sizes, from_vector(std::vector<int64_t>{n_groups}, {1}, pipe.device()))
      ->wait();
  for (int64_t s = 0; s < stages; ++s)
    TD_CHECK_VALUE(sizes[size_t(s)].to_vector<int64_t>()[0] == n_groups,
                   "pipeline checkpoint: stage ", s, "'s optimizer has ",
                   sizes[size_t(s)].to_vector<int64_t>()[0], " parameter groups and stage ",
                   pipe.stage_index(), "'s ", n_groups,
                   ": make every stage's with every group, empty or not "
                   "(optim::adamw_groups(..., keep_empty_groups = true))");
  // How many parameters each stage has in each group (copies not counted), from every stage.
  std::vector<int64_t> mine(size_t(n_groups), 0);
  for (int64_t g = 0; g < n_groups; ++g)
    for (size_t i : groups[size_t(g)].at("params").get<std::vector<size_t>>())
      if (!is_copy(i)) ++mine[size_t(g)];
  std::vector<Tensor> counts;
  for (int64_t s = 0; s < stages; ++s)
    counts.push_back(empty({n_groups}, {.dtype = kInt64, .device = pipe.device()}));
  pipe.group()->all_gather(counts, from_vector(mine, {n_groups}, pipe.device()))->wait();
  std::vector<std::vector<int64_t>> c;
  for (const Tensor& t : counts) c.push_back(t.to_vector<int64_t>());

  out.of_local.assign(params.size(), -1);
  int64_t base = 0;  // one device's first index of group g
  for (int64_t g = 0; g < n_groups; ++g) {
    int64_t next = base;
    for (int64_t s = 0; s < pipe.stage_index(); ++s) next += c[size_t(s)][size_t(g)];
    for (size_t i : groups[size_t(g)].at("params").get<std::vector<size_t>>())
      if (!is_copy(i)) out.of_local[i] = next++;
    int64_t total = 0;
    for (int64_t s = 0; s < stages; ++s) total += c[size_t(s)][size_t(g)];
    std::vector<int64_t> whole(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) whole[size_t(j)] = base + j;
    out.groups.push_back(std::move(whole));
    base += total;
  }
  // A tied copy takes the index its first stage gave the weight (sent over the holders' group).
  const nn::StateDict named = pipe.stage().named_parameters();
  for (const DistributedPipeline::Tied& t : pipe.tied()) {
    size_t local = params.size();
    for (const auto& [name, p] : named)
      if (name == t.name)
        for (size_t i = 0; i < params.size(); ++i)
          if (params[i].is_same(p)) local = i;
    TD_CHECK_VALUE(local < params.size(), "pipeline checkpoint: the optimizer does not hold ",
                   t.name, ", which this stage trains");
    Tensor index = from_vector(std::vector<int64_t>{out.of_local[local]}, {1}, pipe.device());
    t.group->broadcast(index, 0)->wait();
    out.of_local[local] = index.to_vector<int64_t>()[0];
  }
  return out;
}

std::string state_key(int64_t index, const std::string& name) {
  return "state." + std::to_string(index) + "." + name;
}

}  // namespace

nn::StateDict full_state_dict(DistributedPipeline& pipe, const std::shared_ptr<Communicator>& tp) {
  NoGradGuard no_grad;
  return gather_on_first(pipe,
                         tp ? tp::full_state_dict(pipe.stage(), tp) : pipe.stage().state_dict());
}

optim::OptimizerState full_optimizer_state(DistributedPipeline& pipe, optim::Optimizer& optimizer,
                                           const std::shared_ptr<Communicator>& tp) {
  return full_optimizer_state(pipe, optimizer.parameters(), optimizer.state_dict(), tp);
}

optim::OptimizerState full_optimizer_state(DistributedPipeline& pipe,
                                           const std::vector<Tensor>& params,
                                           const optim::OptimizerState& state,
                                           const std::shared_ptr<Communicator>& tp) {
  NoGradGuard no_grad;
  const WholeIndices index = whole_indices(pipe, params, state.param_groups_json);
  const optim::OptimizerState local =
      tp ? tp::put_slices_together(pipe.stage(), params, state, tp) : state;
  nn::StateDict renamed;  // one device's keys; a tied copy's state is its first stage's
  for (const auto& [key, t] : local.tensors) {
    size_t i = 0;
    std::string name;
    if (optim::parse_state_key(key, i, name) && !index.copy[i])
      renamed.emplace_back(state_key(index.of_local[i], name), t);
  }
  nn::StateDict all = gather_on_first(pipe, renamed);
  if (pipe.group()->rank() != 0) return {};
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    size_t i = 0, j = 0;
    std::string n;
    optim::parse_state_key(a.first, i, n);
    optim::parse_state_key(b.first, j, n);
    return i < j;
  });
  nlohmann::json groups = nlohmann::json::parse(local.param_groups_json);
  for (size_t g = 0; g < groups.size(); ++g) groups[g]["params"] = index.groups[g];
  return {std::move(all), groups.dump()};
}

void load_full_state_dict(DistributedPipeline& pipe, const nn::StateDict& whole,
                          const std::shared_ptr<Communicator>& tp, std::string_view source) {
  std::map<std::string, Tensor> by_name(whole.begin(), whole.end());
  nn::StateDict mine;  // the stage's names; a missing one is load_state_dict's error to report
  for (const auto& [name, t] : pipe.stage().state_dict())
    if (const auto it = by_name.find(name); it != by_name.end())
      mine.emplace_back(name, it->second);
  if (tp)
    tp::load_full_state_dict(pipe.stage(), mine, tp, source);
  else
    pipe.stage().load_state_dict(mine, true, source);
}

void load_full_optimizer_state(DistributedPipeline& pipe, optim::Optimizer& optimizer,
                               const optim::OptimizerState& whole,
                               const std::shared_ptr<Communicator>& tp) {
  const std::vector<Tensor> params = optimizer.parameters();
  optimizer.load_state_dict(
      stage_optimizer_state(pipe, params, optimizer.state_dict().param_groups_json, whole, tp));
}

optim::OptimizerState stage_optimizer_state(DistributedPipeline& pipe,
                                            const std::vector<Tensor>& params,
                                            const std::string& groups_json,
                                            const optim::OptimizerState& whole,
                                            const std::shared_ptr<Communicator>& tp) {
  const WholeIndices index = whole_indices(pipe, params, groups_json);
  std::map<int64_t, std::vector<size_t>> local_of;  // one device's index -> this stage's
  for (size_t i = 0; i < index.of_local.size(); ++i) local_of[index.of_local[i]].push_back(i);
  optim::OptimizerState local;
  for (const auto& [key, t] : whole.tensors) {
    size_t w = 0;
    std::string name;
    if (!optim::parse_state_key(key, w, name)) continue;
    if (const auto it = local_of.find(int64_t(w)); it != local_of.end())
      for (size_t i : it->second) local.tensors.emplace_back(state_key(int64_t(i), name), t);
  }
  nlohmann::json groups = nlohmann::json::parse(whole.param_groups_json);
  const nlohmann::json mine = nlohmann::json::parse(groups_json);
  TD_CHECK_VALUE(groups.size() == mine.size(), "pipeline checkpoint: the optimizer state has ",
                 groups.size(), " parameter groups, this stage's optimizer ", mine.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g]["params"] = mine[g].at("params");
  local.param_groups_json = groups.dump();
  return tp ? tp::slices_of(pipe.stage(), params, local, tp) : local;
}

}  // namespace tandem::parallel
