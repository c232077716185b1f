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
#include <functional>
#include <map>
#include <set>
#include <sstream>
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

// Throws on every rank when any rank's attempt failed: that rank its own exception, the others a
// DataError with the first failed rank's message.
void agree(Communicator* world, Device device, const Attempt& mine) {
  if (world != nullptr && world->size() > 1) {
    const std::vector<int> failed = failed_ranks(*world, device, mine.error);
    if (failed.empty()) return;
    const std::string text = broadcast_string(*world, mine.error, failed.front());
    if (!mine.exception) ::tandem::detail::fail<DataError>(text);
  }
  if (mine.exception) std::rethrow_exception(mine.exception);
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
  Attempt outcome;  // rank 0's, for agree()
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
  Attempt& outcome = out.outcome;
  for (size_t r = 0; r < texts.size(); ++r) {
    const json theirs = json::parse(texts[r]);
    for (const auto& item : theirs.items()) {
      // Named, not bound: the checks below capture them (clang 14 captures no bindings).
      const std::string key = item.key();
      const json& p = item.value();
      const int64_t n = p["elements"];
      Tensor part;
      if (n > 0 && r == 0) part = held.at(key).contiguous().reshape({n});
      if (n > 0 && r > 0) {
        part = empty({n}, {.dtype = sharded_index::dtype_named(p["dtype"], key), .device = device});
        world->recv(part, int(r))->wait();
      }
      if (outcome.exception) continue;  // every part is still received
      outcome = attempt([&] {
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
  for (const auto& entry : filled) {
    const std::string& key = entry.first;
    const std::vector<bool>& marks = entry.second;
    const auto gap = std::find(marks.begin(), marks.end(), false);
    if (!outcome.exception && gap != marks.end())
      outcome = attempt([&] {
        TD_CHECK_VALUE(false, by, ": element ", gap - marks.begin(), " of \"", key,
                       "\" is held by no rank");
      });
  }
  return out;
}

}  // namespace

nn::StateDict full_state_dict(const PlacementTable& table, nn::Module& model, Communicator* world) {
  check_world(table, world, "full_state_dict");
  const Device device = device_of(table);
  HeldParts mine;
  // The model's state_dict names, in order, each with the part it is (a tied name: its weight's).
  json names = {{"names", json::array()}};  // [key, part, the part's stage]
  agree(world, device, attempt([&] {
          table.check_held("full_state_dict");
          mine = held_parts(table, model.named_buffers(), nullptr, "full_state_dict");
          for (const auto& [key, t] : model.state_dict()) {
            const std::string part = table.name_of(t);  // a ZeRO rank's parameter: its pieces' name
            const std::string whole = part.empty() ? key : part;
            names["names"].push_back({key, whole, table.stage(whole)});
          }
        }));
  const std::vector<std::string> all_names = gather_strings(world, names.dump());
  Wholes wholes = put_together(mine, world, device, "full_state_dict");
  nn::StateDict out;
  const Attempt outcome = attempt([&] {
    if (world && world->rank() != 0) return;
    // One device's order: the stages' in order, each stage's names in its order.
    std::vector<std::tuple<std::vector<int64_t>, size_t, std::string, std::string>> order;
    for (const std::string& text : all_names) {
      const json j = json::parse(text);
      for (size_t i = 0; i < j["names"].size(); ++i)
        order.emplace_back(j["names"][i][2].get<std::vector<int64_t>>(), i, j["names"][i][0],
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
  agree(world, device, wholes.outcome.exception ? wholes.outcome : outcome);
  return out;
}

nn::StateDict full_gradients(const PlacementTable& table, Communicator* world) {
  check_world(table, world, "full_gradients");
  const Device device = device_of(table);
  HeldParts mine;
  agree(world, device, attempt([&] { mine = held_gradients(table, "full_gradients"); }));
  Wholes wholes = put_together(mine, world, device, "full_gradients");
  agree(world, device, wholes.outcome);
  nn::StateDict out;
  for (const auto& [key, t] : wholes.tensors) out.emplace_back(key.substr(5), t);  // "grad."
  return out;
}

optim::OptimizerState full_optimizer_state(const PlacementTable& table, nn::Module& model,
                                           const optim::Optimizer& optimizer, Communicator* world) {
  check_world(table, world, "full_optimizer_state");
  const Device device = device_of(table);
  const OptimizerNumbering numbering = number_parameters(table, model, optimizer, world);
  HeldParts mine;
  agree(world, device,
        attempt([&] { mine = held_parts(table, {}, &optimizer, "full_optimizer_state"); }));
  Wholes wholes = put_together(mine, world, device, "full_optimizer_state");
  optim::OptimizerState out;
  const Attempt outcome = attempt([&] {
    if (world && world->rank() != 0) return;
    // (one device's index, the optimizer's order of its states, their name, the tensor)
    std::vector<std::tuple<int64_t, int64_t, std::string, Tensor>> states;
    for (const auto& [key, t] : wholes.tensors) {
      const json& m = wholes.meta[key];
      if (!m.contains("param")) continue;
      const auto j = numbering.index.find(m["param"].get<std::string>());
      TD_CHECK_VALUE(j != numbering.index.end(), "full_optimizer_state: \"", key,
                     "\" is the state of a parameter no optimizer holds");
      states.emplace_back(j->second, m.value("order", 0), m["state"].get<std::string>(), t);
    }
    std::sort(states.begin(), states.end(), [](const auto& a, const auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    for (const auto& [j, order, what, t] : states)
      out.tensors.emplace_back(str("state.", j, ".", what), t);
    json groups = json::parse(optimizer.state_dict().param_groups_json);
    for (size_t g = 0; g < groups.size(); ++g) groups[g]["params"] = numbering.groups[g];
    out.param_groups_json = groups.dump();
  });
  agree(world, device, wholes.outcome.exception ? wholes.outcome : outcome);
  return out;
}

namespace {

// Which elements of its whole tensor e's local tensor holds (computed once per entry: it walks
// an index table of the whole's size).
std::vector<int64_t> elements_of(const PlacedTensor& e, const PlacementTable& table) {
  return held_elements(e.whole, applied_placements(e, table), e.local.numel(), e.name);
}

// The elements `at` of `whole` (shaped as e's whole tensor), shaped as e's local tensor is.
Tensor cut_like(const Tensor& whole, const PlacedTensor& e, const std::vector<int64_t>& at) {
  const Tensor src = whole.to(Device::cpu()).contiguous().reshape({whole.numel()});
  Tensor part = zeros({e.local.numel()}, {.dtype = src.dtype()});
  take_elements(src, at, part);
  return part.reshape(e.local.shape());
}

}  // namespace

void load_full_state_dict(const PlacementTable& table, nn::Module& model,
                          const nn::StateDict& whole, Communicator* world,
                          std::string_view source) {
  check_world(table, world, "load_full_state_dict");
  NoGradGuard no_grad;
  const Device device = device_of(table);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < whole.size(); ++i) index.emplace(whole[i].first, i);
  std::vector<float> used(whole.size() + 1, 0);  // + 1: never empty
  // First what this rank needs, and what does not fit; nothing is copied unless all fits.
  std::string problems;
  std::vector<std::function<void()>> copies;
  const auto need = [&](const std::string& part, const Shape& shape) -> const Tensor* {
    const auto it = index.find(part);
    if (it == index.end()) {
      problems += "\n  missing: " + part;
      return nullptr;
    }
    used[it->second] = 1;
    const Tensor& w = whole[it->second].second;
    if (w.shape() == shape) return &w;
    problems += str("\n  ", part, ": ", w.shape(), " given, ", shape, " expected");
    return nullptr;
  };
  for (const PlacedTensor& e : table.entries())  // what this rank trains, as it holds it
    if (const Tensor* w = need(e.name, e.whole))
      copies.push_back([&e, w, &table] {
        Tensor(e.local).copy_(cut_like(*w, e, elements_of(e, table)).to(e.local.device()));
      });
  const nn::StateDict buffers = model.named_buffers();
  for (const auto& named : model.state_dict()) {
    const std::string& key = named.first;
    const Tensor t = named.second;  // a handle: the copy below fills the module's tensor
    const bool buffer = std::any_of(buffers.begin(), buffers.end(),
                                    [&](const auto& b) { return b.second.is_same(t); });
    if (!buffer) {  // a tied weight's other name, or a parameter ZeRO trains in pieces
      if (const auto k = index.find(key); k != index.end()) used[k->second] = 1;
    } else if (const Tensor* w = need(key, t.shape())) {
      copies.push_back([t, w] { Tensor(t).copy_(w->to(t.device())); });
    }
  }
  // What no rank's model has: the same verdict on every rank.
  Tensor any = from_vector(used, {int64_t(used.size())}).to(device);
  if (world) world->all_reduce(any)->wait();
  const std::vector<float> by_any = any.to(Device::cpu()).to_vector<float>();
  std::string unexpected;
  for (size_t i = 0; i < whole.size(); ++i)
    if (by_any[i] == 0) unexpected += "\n  unexpected: " + whole[i].first;
  const bool failed = world && world->size() > 1 ? !failed_ranks(*world, device, problems).empty()
                                                 : !problems.empty();
  if (failed || !unexpected.empty()) {
    std::string lines;  // every rank's, each once, in rank order
    std::set<std::string> seen;
    for (const std::string& text :
         failed ? gather_strings(world, problems) : std::vector<std::string>{}) {
      std::istringstream in(text);
      for (std::string line; std::getline(in, line);)
        if (!line.empty() && seen.insert(line).second) lines += "\n" + line;
    }
    ::tandem::detail::fail<DataError>(
        "load_full_state_dict", source.empty() ? "" : " (" + std::string(source) + ")",
        ": the state dict does not fit the model",
        unexpected.empty() ? "" : " (a checkpoint of another model?)", ":", lines, unexpected);
  }
  for (const auto& copy : copies) copy();
}

void load_full_optimizer_state(const PlacementTable& table, nn::Module& model,
                               optim::Optimizer& optimizer, const optim::OptimizerState& whole,
                               Communicator* world) {
  check_world(table, world, "load_full_optimizer_state");
  NoGradGuard no_grad;
  const OptimizerNumbering numbering = number_parameters(table, model, optimizer, world);
  const Attempt outcome = attempt([&] {
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
      std::vector<int64_t> at;  // e's elements, once for all its per-element states
      for (const auto& [what, t] : of[j]) {
        const bool per_element = t.dim() > 0;
        TD_CHECK_AS(DataError, !per_element || t.shape() == e->whole,
                    "load_full_optimizer_state: the state \"", what, "\" of \"", e->name, "\" is ",
                    t.shape(), ", the parameter ", e->whole);
        if (per_element && at.empty()) at = elements_of(*e, table);
        local.tensors.emplace_back(
            str("state.", i, ".", what),
            (per_element ? cut_like(t, *e, at) : t.clone()).to(e->local.device()));
      }
    }
    optimizer.load_state_dict(local);
  });
  agree(world, device_of(table), outcome);
}

nn::StateDict broadcast_state_dict(const nn::StateDict& state, Communicator* world, Device device) {
  if (world == nullptr || world->size() == 1) return state;
  // The names, shapes and dtypes first, so every rank can make room; then each tensor.
  const bool root = world->rank() == 0;
  json list = json::array();
  for (const auto& [key, t] : state) list.push_back({key, t.shape(), std::string(name(t.dtype()))});
  list = json::parse(broadcast_string(*world, root ? list.dump() : ""));
  nn::StateDict out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = list[i][0];
    Tensor t =
        root ? state[i].second.to(device).contiguous().clone()
             : empty(list[i][1].get<Shape>(),
                     {.dtype = sharded_index::dtype_named(list[i][2], key), .device = device});
    world->broadcast(t, 0)->wait();
    out.emplace_back(key, t.to(Device::cpu()));
  }
  return out;
}

optim::OptimizerState broadcast_optimizer_state(const optim::OptimizerState& state,
                                                Communicator* world, Device device) {
  if (world == nullptr || world->size() == 1) return state;
  const std::string groups = broadcast_string(*world, state.param_groups_json);
  return {broadcast_state_dict(state.tensors, world, device), groups};
}

}  // namespace tandem::parallel
