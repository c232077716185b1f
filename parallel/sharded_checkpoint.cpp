// parallel/sharded_checkpoint.cpp — writing a step: each rank its file of the tensors it is the one
// to write, rank 0 the index of every rank's parts, then `latest`.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/sharded_checkpoint_index.h>
#include <algorithm>

namespace tandem::parallel {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sharded_index;
namespace {

// Whether this rank writes `e`: along each dimension where the ranks hold the same tensor
// (Replicate, Partial), only the rank at coordinate 0 does; a tied copy another stage counts,
// none.
bool writes(const PlacedTensor& e, const PlacementTable& table) {
  if (!e.counted) return false;
  for (const PlacementTable::Dimension& d : table.dimensions()) {
    if (d.across == Across::Stages) continue;  // each stage holds its own tensors
    const Placement p = e.along(d.name);
    const bool divided = std::holds_alternative<Shard>(p) || std::holds_alternative<Piece>(p);
    if (!divided && d.group->rank() != 0) return false;
  }
  return true;
}

bool writes_replicated(const PlacementTable& table) { return writes(PlacedTensor{}, table); }

// One rank's tensors and its parts of the index.
struct Written {
  NamedTensorList tensors;
  json parts = json::object();  // key -> {shape, dtype, placements[, param, state]}

  void add(const std::string& key, const Tensor& t, const Shape& whole, const json& placements) {
    if (parts.contains(key)) return;  // a scalar state every piece of a parameter has
    parts[key] = {{"shape", whole},
                  {"dtype", std::string(name(t.dtype()))},
                  {"placements", placements},
                  {"elements", t.numel()}};
    if (t.numel() > 0) tensors.emplace_back(key, t);
  }
};

Written this_ranks_part(const PlacementTable& table, const nn::StateDict& buffers,
                        const optim::Optimizer* optimizer) {
  Written w;
  for (const PlacedTensor& e : table.entries()) {
    TD_CHECK_VALUE(!e.name.empty(), "save_sharded_checkpoint: a ", e.local.shape(),
                   " tensor of the placement table has no name; record it with its name in one "
                   "device's model");
    if (writes(e, table))
      w.add("model." + e.name, e.local, e.whole, to_json(applied_placements(e, table)));
  }
  if (writes_replicated(table))
    for (const auto& [name, b] : buffers) w.add("model." + name, b, b.shape(), json::array());
  if (optimizer == nullptr) return w;
  const optim::OptimizerState state = optimizer->state_dict();
  const std::vector<Tensor> params = optimizer->parameters();
  for (const auto& [key, t] : state.tensors) {
    size_t j;
    std::string what;
    if (!optim::parse_state_key(key, j, what)) continue;
    const PlacedTensor* e = j < params.size() ? table.find(params[j]) : nullptr;
    TD_CHECK_VALUE(e != nullptr, "save_sharded_checkpoint: the optimizer's parameter ", j,
                   " is not in the placement table (", table.str(),
                   "); give the optimizer over the table's tensors (under ZeRO its inner())");
    if (!writes(*e, table)) continue;
    // Shaped like the rank's tensor (Adam's moments): cut as it is. Else a scalar (Adam's step).
    const bool per_element = t.dim() > 0 && t.shape() == e->local.shape();
    const std::string k = "optim." + e->name + "." + what;
    w.add(k, t, per_element ? e->whole : t.shape(),
          per_element ? to_json(applied_placements(*e, table)) : json::array());
    w.parts[k]["param"] = e->name;
    w.parts[k]["state"] = what;
    w.parts[k]["per_element"] = per_element;
  }
  return w;
}

// Every rank's parts, on rank 0: the index's "tensors". The collectives first, then the checks
// (which throw on rank 0 alone, after every rank has left the broadcasts).
json gather_index(Communicator& world, const json& mine) {
  std::vector<std::string> texts;
  for (int r = 0; r < world.size(); ++r)
    texts.push_back(broadcast_string(world, world.rank() == r ? mine.dump() : "", r));
  json tensors = json::object();
  if (world.rank() != 0) return tensors;
  for (int r = 0; r < world.size(); ++r) {
    const json theirs = json::parse(texts[size_t(r)]);
    for (const auto& [key, p] : theirs.items()) {
      json& t = tensors[key];
      if (t.is_null()) {
        t = p;
        t.erase("placements");
        t.erase("elements");
        t["parts"] = json::array();
      }
      TD_CHECK_VALUE(t["shape"] == p["shape"], "save_sharded_checkpoint: rank ", r, " holds \"",
                     key, "\" as part of a ", p["shape"].dump(), " tensor, another rank of a ",
                     t["shape"].dump());
      if (p["elements"].get<int64_t>() > 0)
        t["parts"].push_back(
            {{"file", rank_file(r, world.size())}, {"placements", p["placements"]}});
    }
  }
  return tensors;
}

// Every rank learns whether every rank managed `what` (its `error` empty): a failure on any rank
// is an exception of `E` on all of them, naming the ranks, so that none waits in a collective a
// failed one never enters.
template <typename E>
void agree(Communicator& world, Device device, const std::string& error, const std::string& what,
           const std::string& after) {
  const int64_t n = world.size();
  Tensor failed = zeros({n}, {.device = device});
  if (!error.empty()) failed.narrow(0, world.rank(), 1).fill_(1);
  world.all_reduce(failed)->wait();
  const std::vector<float> who = failed.to(Device::cpu()).to_vector<float>();
  std::string bad;
  for (int64_t r = 0; r < n; ++r)
    if (who[size_t(r)] > 0) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  TD_CHECK_AS(E, bad.empty(), "save_sharded_checkpoint: rank ", bad, " could not ", what,
              error.empty() ? "" : ": " + error, after);
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The product of the table's dimensions: the ranks a save of it must hear from.
int64_t ranks_of(const PlacementTable& table) {
  int64_t n = 1;
  for (const PlacementTable::Dimension& d : table.dimensions()) n *= d.group->size();
  return n;
}

}  // namespace

void save_sharded_checkpoint(const std::string& dir, int64_t step, Communicator& world,
                             const PlacementTable& table, const nn::StateDict& buffers,
                             const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata) {
  NoGradGuard no_grad;
  // The same on every rank, so every rank refuses alike: two ranks of the table that are one
  // rank of `world` would write one file, and the last rename would win.
  TD_CHECK_VALUE(ranks_of(table) == world.size(),
                 "save_sharded_checkpoint: the placement table "
                 "spans ",
                 ranks_of(table), " ranks (", table.str(), "), the world ", world.size(),
                 "; save with the communicator of every rank of the run");
  const int64_t rank = world.rank(), n = world.size();
  const std::string step_name = str("step-", step);
  const fs::path where = fs::path(dir) / step_name, latest = fs::path(dir) / "latest";
  const std::string kept = str("; ", latest.string(), " still names the previous checkpoint");
  Device device = Device::cpu();  // the communicator's: where the table's tensors are
  for (const PlacedTensor& e : table.entries()) device = e.local.device();
  Written mine;
  agree<ValueError>(world, device, error_of([&] {
                      table.check_held("save_sharded_checkpoint");
                      mine = this_ranks_part(table, buffers, optimizer);
                    }),
                    "list what it holds", kept);
  json index = {{"format", 2}, {"world", n}, {"step", step}, {"metadata", metadata}};
  std::string error = error_of([&] {
    index["tensors"] = gather_index(world, mine.parts);  // collective; checks on rank 0
    if (optimizer) index["param_groups"] = optimizer->state_dict().param_groups_json;
    if (rank == 0) fs::create_directories(where);
  });
  agree<DataError>(world, device, error, "prepare " + where.string(), kept);
  error = error_of([&] {
    save_safetensors((where / rank_file(rank, n)).string(), mine.tensors,
                     {{"step", std::to_string(step)}});
  });
  agree<DataError>(world, device, error, "write its file of " + where.string(), kept);
  error = error_of([&] {
    if (rank != 0) return;
    write_text(where / "index.json", index.dump(1));
    write_text(latest, step_name);  // the commit
  });
  agree<DataError>(world, device, error, "commit " + where.string(), kept);
}

std::map<std::string, std::string> sharded_checkpoint_metadata(const std::string& dir) {
  return metadata_of(read_index(fs::path(dir) / latest_step(dir) / "index.json"));
}

bool is_sharded_checkpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / "latest", ec);
}

std::vector<std::string> superseded_steps(const std::string& dir) {
  std::vector<std::string> old;
  const std::string latest = latest_step(dir);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.starts_with("step-") && name != latest)
      old.push_back(e.path().string());
  }
  std::sort(old.begin(), old.end());
  return old;
}

}  // namespace tandem::parallel
