// parallel/sharded_checkpoint.cpp — writing a step: each rank its file of the tensors it is the one
// to write, rank 0 the index of every rank's parts, then `latest`.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/parallel/comm/agreed_failure.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <tandem/parallel/held_parts.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/sharded_checkpoint_index.h>
#include <algorithm>

namespace tandem::parallel {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sharded_index;
namespace {

// Every rank's parts, on rank 0: the index's "tensors". The collectives first, then the checks
// (which throw on rank 0 alone, after every rank has left the broadcasts).
json gather_index(Communicator& world, const json& mine) {
  const std::vector<std::string> texts = all_gather_strings(world, mine.dump());
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
  std::string bad;
  for (const int r : failed_ranks(world, device, error))
    bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  TD_CHECK_AS(E, bad.empty(), "save_sharded_checkpoint: rank ", bad, " could not ", what,
              error.empty() ? "" : ": " + error, after);
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
  HeldParts mine;
  agree<ValueError>(world, device, error_of([&] {
                      table.check_held("save_sharded_checkpoint");
                      mine = held_parts(table, buffers, optimizer, "save_sharded_checkpoint");
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

Shape sharded_checkpoint_shape(const std::string& dir, const std::string& name) {
  const fs::path path = fs::path(dir) / latest_step(dir) / "index.json";
  const json index = read_index(path);
  const std::string key = "model." + name;
  TD_CHECK_AS(DataError, index["tensors"].contains(key), "sharded checkpoint: ", path.string(),
              " has no \"", key, "\"");
  return index["tensors"][key]["shape"].get<Shape>();
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
