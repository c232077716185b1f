// parallel/whole_state.cpp — every rank's parts sent to rank 0 and put together there; loading,
// each rank's elements taken from the whole tensors. Every failure is agreed over the world, so
// that no rank waits in a collective another left.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/agreed_failure.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/held_parts.h>
#include <tandem/parallel/optimizer_numbering.h>
#include <tandem/parallel/sharded_checkpoint_index.h>
#include <tandem/parallel/whole_state.h>
#include <algorithm>
#include <map>
#include <tuple>

namespace tandem::parallel {
using nlohmann::json;
namespace {

// Where the table's tensors are: what the collectives carry (NCCL's are CUDA tensors).
Device device_of(const PlacementTable& table) {
  for (const PlacedTensor& e : table.entries()) return e.local.device();
  return Device::cpu();
}

void check_world(const PlacementTable& table, Communicator* world, std::string_view by) {
  const int64_t n = world ? world->size() : 1;
  TD_CHECK_VALUE(ranks_of(table) == n, by, ": the placement table spans ", ranks_of(table),
                 " ranks (", table.str(), "), the world ", n,
                 "; give the communicator of every rank of the run");
}

// Throws, on every rank, the first failed rank's error, if any rank's `error` is not empty.
void agree(Communicator* world, Device device, const std::string& error) {
  if (world == nullptr || world->size() == 1) {
    TD_CHECK_AS(DataError, error.empty(), error);
    return;
  }
  const std::vector<int> failed = failed_ranks(*world, device, error);
  if (!failed.empty())
    ::tandem::detail::fail<DataError>(broadcast_string(*world, error, failed.front()));
}

std::vector<std::string> gather_strings(Communicator* world, const std::string& mine) {
  return world ? all_gather_strings(*world, mine) : std::vector<std::string>{mine};
}

// The whole tensors of every rank's parts, by key, on rank 0 (on the CPU), with each key's
// description (its first giver's); empty elsewhere. The other ranks send their parts in their
// JSON's key order; rank 0 receives every part before it reports any error.
struct Wholes {
  std::map<std::string, Tensor> tensors;
  json meta = json::object();
  std::string error;  // rank 0's, for agree()
};

Wholes put_together(const HeldParts& mine, Communicator* world, Device device,
                    std::string_view by) {
  NoGradGuard no_grad;
  const std::vector<std::string> texts = gather_strings(world, mine.parts.dump());
  const std::map<std::string, Tensor> held(mine.tensors.begin(), mine.tensors.end());
  const int rank = world ? world->rank() : 0;
  Wholes out;
  if (rank != 0) {
    std::vector<Tensor> sent;
    std::vector<WorkPtr> sends;
    for (const auto& [key, p] : mine.parts.items()) {
      if (p["elements"].get<int64_t>() == 0) continue;
      sent.push_back(held.at(key).contiguous().reshape({p["elements"].get<int64_t>()}));
      sends.push_back(world->send(sent.back(), 0));
    }
    for (const WorkPtr& w : sends) w->wait();
    return out;
  }
  std::map<std::string, std::vector<bool>> filled;
  std::string& error = out.error;
  for (size_t r = 0; r < texts.size(); ++r) {
    const json theirs = json::parse(texts[r]);
    for (const auto& [key, p] : theirs.items()) {
      const int64_t n = p["elements"];
      Tensor part;
      if (n > 0 && r == 0) part = held.at(key).contiguous().reshape({n});
      if (n > 0 && r > 0) {
        part = empty({n}, {.dtype = sharded_index::dtype_named(p["dtype"], key), .device = device});
        world->recv(part, int(r))->wait();
      }
      if (!error.empty()) continue;  // every part is still received
      error = error_of([&] {
        const Shape shape = p["shape"].get<Shape>();
        Tensor& whole = out.tensors[key];
        if (!whole.defined()) {
          whole = zeros(shape, {.dtype = sharded_index::dtype_named(p["dtype"], key)});
          filled[key].assign(size_t(whole.numel()), false);
          out.meta[key] = p;
        }
        TD_CHECK_VALUE(
            whole.shape() == shape && whole.dtype() == sharded_index::dtype_named(p["dtype"], key),
            by, ": rank ", r, " holds \"", key, "\" as part of a ", shape, " tensor of ",
            p["dtype"].get<std::string>(), ", another rank of a ", whole.shape(), " tensor of ",
            name(whole.dtype()));
        if (n == 0) return;
        const std::vector<AppliedPlacement> chain =
            sharded_index::placements_of_part(p, shape, key, std::string(by));
        const std::vector<int64_t> at = held_elements(shape, chain, n, key);
        put_elements(part.to(Device::cpu()).contiguous(), at, whole);
        for (const int64_t i : at)
          if (i >= 0) filled[key][size_t(i)] = true;
      });
    }
  }
  for (const auto& [key, marks] : filled) {
    const auto gap = std::find(marks.begin(), marks.end(), false);
    if (error.empty() && gap != marks.end())
      error = str(by, ": element ", gap - marks.begin(), " of \"", key, "\" is held by no rank");
  }
  return out;
}

}  // namespace

nn::StateDict full_state_dict(const PlacementTable& table, nn::Module& model, Communicator* world) {
  check_world(table, world, "full_state_dict");
  const Device device = device_of(table);
  std::string error;
  HeldParts mine;
  // The model's state_dict names, in order, each with the part it is (a tied name: its weight's).
  json names = {{"stage", table.stage()}, {"names", json::array()}};
  error = error_of([&] {
    table.check_held("full_state_dict");
    mine = held_parts(table, model.named_buffers(), nullptr, "full_state_dict");
    for (const auto& [key, t] : model.state_dict()) {
      const std::string part = table.name_of(t);  // a ZeRO rank's parameter: its pieces' name
      names["names"].push_back({key, part.empty() ? key : part});
    }
  });
  agree(world, device, error);
  const std::vector<std::string> all_names = gather_strings(world, names.dump());
  Wholes wholes = put_together(mine, world, device, "full_state_dict");
  nn::StateDict out;
  error = error_of([&] {
    if (world && world->rank() != 0) return;
    // One device's order: the stages' in order, each stage's names in its order.
    std::vector<std::tuple<std::vector<int64_t>, size_t, std::string, std::string>> order;
    for (const std::string& text : all_names) {
      const json j = json::parse(text);
      for (size_t i = 0; i < j["names"].size(); ++i)
        order.emplace_back(j["stage"].get<std::vector<int64_t>>(), i, j["names"][i][0],
                           j["names"][i][1]);
    }
    std::stable_sort(order.begin(), order.end());
    std::map<std::string, bool> seen;
    for (const auto& [stage, i, key, part] : order) {
      if (seen[key]) continue;
      seen[key] = true;
      const auto it = wholes.tensors.find("model." + part);
      TD_CHECK_VALUE(it != wholes.tensors.end(), "full_state_dict: no rank gives \"", part, "\"",
                     key == part ? "" : " (the model's \"" + key + "\")", "; ", table.str());
      out.emplace_back(key, it->second);
    }
  });
  agree(world, device, wholes.error.empty() ? error : wholes.error);
  return out;
}

optim::OptimizerState full_optimizer_state(const PlacementTable& table, nn::Module& model,
                                           const optim::Optimizer& optimizer, Communicator* world) {
  check_world(table, world, "full_optimizer_state");
  const Device device = device_of(table);
  const OptimizerNumbering numbering = number_parameters(table, model, optimizer, world);
  HeldParts mine;
  std::string error =
      error_of([&] { mine = held_parts(table, {}, &optimizer, "full_optimizer_state"); });
  agree(world, device, error);
  Wholes wholes = put_together(mine, world, device, "full_optimizer_state");
  optim::OptimizerState out;
  error = error_of([&] {
    if (world && world->rank() != 0) return;
    std::vector<std::tuple<int64_t, std::string, Tensor>> states;  // (one device's index, name)
    for (const auto& [key, t] : wholes.tensors) {
      const json& m = wholes.meta[key];
      if (!m.contains("param")) continue;
      const auto j = numbering.index.find(m["param"].get<std::string>());
      TD_CHECK_VALUE(j != numbering.index.end(), "full_optimizer_state: \"", key,
                     "\" is the state of a parameter no optimizer holds");
      states.emplace_back(j->second, m["state"].get<std::string>(), t);
    }
    std::sort(states.begin(), states.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    for (const auto& [j, what, t] : states)
      out.tensors.emplace_back(str("state.", j, ".", what), t);
    json groups = json::parse(optimizer.state_dict().param_groups_json);
    for (size_t g = 0; g < groups.size(); ++g) groups[g]["params"] = numbering.groups[g];
    out.param_groups_json = groups.dump();
  });
  agree(world, device, wholes.error.empty() ? error : wholes.error);
  return out;
}

namespace {

// This rank's elements of `whole` (shaped as e's whole tensor), as e's local tensor is cut.
Tensor cut_like(const Tensor& whole, const PlacedTensor& e, const PlacementTable& table) {
  const Tensor src = whole.to(Device::cpu()).contiguous().reshape({whole.numel()});
  Tensor part = zeros({e.local.numel()}, {.dtype = src.dtype()});
  take_elements(src, held_elements(e.whole, applied_placements(e, table), e.local.numel(), e.name),
                part);
  return part.reshape(e.local.shape());
}

}  // namespace

void load_full_state_dict(const PlacementTable& table, nn::Module& model,
                          const nn::StateDict& whole, Communicator* world,
                          std::string_view source) {
  check_world(table, world, "load_full_state_dict");
  NoGradGuard no_grad;
  const Device device = device_of(table);
  const std::string from = source.empty() ? "the state dict" : std::string(source);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < whole.size(); ++i) index.emplace(whole[i].first, i);
  Tensor used = zeros({int64_t(whole.size()) + 1}, {.device = device});  // + 1: never empty
  std::vector<float> mine(whole.size() + 1, 0);
  const std::string error = error_of([&] {
    // A tensor's whole, as `part` names it in `whole`, checked to be `shape`.
    const auto whole_of = [&](const std::string& part, const Shape& shape) -> const Tensor& {
      const auto it = index.find(part);
      TD_CHECK_AS(DataError, it != index.end(), "load_full_state_dict: ", from, " has no \"", part,
                  "\"");
      mine[it->second] = 1;
      const Tensor& w = whole[it->second].second;
      TD_CHECK_AS(DataError, w.shape() == shape, "load_full_state_dict: \"", part, "\" is ",
                  w.shape(), " in ", from, ", ", shape, " in the model");
      return w;
    };
    for (const PlacedTensor& e : table.entries())  // what this rank trains, as it holds it
      Tensor(e.local).copy_(cut_like(whole_of(e.name, e.whole), e, table).to(e.local.device()));
    const nn::StateDict buffers = model.named_buffers();
    for (auto& [key, t] : model.state_dict()) {
      const bool buffer = std::any_of(buffers.begin(), buffers.end(),
                                      [&](const auto& b) { return b.second.is_same(t); });
      if (buffer) {
        t.copy_(whole_of(key, t.shape()).to(t.device()));
      } else if (const auto k = index.find(key); k != index.end()) {
        // A tied weight's other name, or a parameter this rank trains in pieces (ZeRO's:
        // loaded through them, then gathered).
        mine[k->second] = 1;
      }
    }
  });
  agree(world, device, error);
  used.copy_(from_vector(mine, {int64_t(mine.size())}).to(device));
  if (world) world->all_reduce(used)->wait();
  const std::vector<float> by_any = used.to(Device::cpu()).to_vector<float>();
  std::string extra;
  for (size_t i = 0; i < whole.size(); ++i)
    if (by_any[i] == 0) extra += (extra.empty() ? "\"" : ", \"") + whole[i].first + "\"";
  TD_CHECK_AS(DataError, extra.empty(), "load_full_state_dict: ", from, " holds ", extra,
              ", which the model does not have (a checkpoint of another model?)");
}

void load_full_optimizer_state(const PlacementTable& table, nn::Module& model,
                               optim::Optimizer& optimizer, const optim::OptimizerState& whole,
                               Communicator* world) {
  check_world(table, world, "load_full_optimizer_state");
  NoGradGuard no_grad;
  const OptimizerNumbering numbering = number_parameters(table, model, optimizer, world);
  const std::string error = error_of([&] {
    std::map<int64_t, std::vector<std::pair<std::string, Tensor>>> of;  // index -> its state
    for (const auto& [key, t] : whole.tensors) {
      size_t j;
      std::string what;
      if (optim::parse_state_key(key, j, what)) of[int64_t(j)].emplace_back(what, t);
    }
    json saved = json::parse(whole.param_groups_json, nullptr, false);
    const json own = json::parse(optimizer.state_dict().param_groups_json);
    TD_CHECK_AS(DataError, saved.is_array() && saved.size() == numbering.groups.size(),
                "load_full_optimizer_state: the state has ", saved.is_array() ? saved.size() : 0,
                " parameter groups, the optimizer ", numbering.groups.size());
    for (size_t g = 0; g < saved.size(); ++g) {
      TD_CHECK_AS(DataError,
                  saved[g].contains("params") &&
                      saved[g]["params"].get<std::vector<int64_t>>() == numbering.groups[g],
                  "load_full_optimizer_state: group ", g, " of the state holds parameters ",
                  saved[g].value("params", json::array()).dump(), ", one device's optimizer ",
                  json(numbering.groups[g]).dump(), " (a state of another model?)");
      saved[g]["params"] = own[g].at("params");
    }
    optim::OptimizerState local{{}, saved.dump()};
    const std::vector<Tensor> params = optimizer.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const PlacedTensor* e = table.find(params[i]);
      TD_CHECK_VALUE(e != nullptr, "load_full_optimizer_state: the optimizer's parameter ", i,
                     " is not in the placement table (", table.str(), ")");
      const int64_t j = numbering.index.at(e->name);
      for (const auto& [what, t] : of[j]) {
        const bool per_element = t.dim() > 0;
        TD_CHECK_AS(DataError, !per_element || t.shape() == e->whole,
                    "load_full_optimizer_state: the state \"", what, "\" of \"", e->name, "\" is ",
                    t.shape(), ", the parameter ", e->whole);
        local.tensors.emplace_back(
            str("state.", i, ".", what),
            (per_element ? cut_like(t, *e, table) : t.clone()).to(e->local.device()));
      }
    }
    optimizer.load_state_dict(local);
  });
  agree(world, device_of(table), error);
}

}  // namespace tandem::parallel
