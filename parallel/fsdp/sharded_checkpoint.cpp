// parallel/fsdp/sharded_checkpoint.cpp — per-rank files, the index that says which rows each
// holds, and reading a row range back from whichever files hold it.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tandem::parallel {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

std::string rank_file(int64_t rank, int64_t world) {
  return str("rank-", rank, "-of-", world, ".safetensors");
}

int64_t rows_in(const Shape& s) { return s.empty() ? 1 : s[0]; }

// torch.chunk's cut, as the units make it: rank r holds whole rows [begin, end).
std::pair<int64_t, int64_t> rows_of(int64_t rows, int64_t world, int64_t r) {
  const int64_t c = (rows + world - 1) / world;
  return {std::min(r * c, rows), std::min((r + 1) * c, rows)};
}

// The index entry of a tensor: sharded by rows over every rank, or whole in rank 0's file.
json entry(const Shape& whole, DType dtype, bool sharded, int64_t world) {
  json parts = json::array();
  const int64_t rows = rows_in(whole);
  for (int64_t r = 0; r < (sharded ? world : 1); ++r) {
    const auto [b, e] = sharded ? rows_of(rows, world, r) : std::pair<int64_t, int64_t>{0, rows};
    if (e > b) parts.push_back({{"file", rank_file(r, world)}, {"rows", {b, e}}});
  }
  return {{"shape", whole}, {"dtype", std::string(name(dtype))}, {"parts", parts}};
}

void write_text(const fs::path& path, const std::string& text) {
  AtomicFile f(path.string(), "save_sharded_checkpoint");
  f.write(text.data(), text.size());
  f.commit();
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  TD_CHECK_AS(DataError, in.good(), "load_sharded_checkpoint: cannot read ", path.string(),
              "; a sharded checkpoint directory holds `latest` and step-<S>/index.json (written "
              "by save_sharded_checkpoint)");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The step directory `dir/latest` names ("step-<S>").
std::string latest_step(const std::string& dir) {
  std::string name = read_text(fs::path(dir) / "latest");
  while (!name.empty() && std::isspace((unsigned char)name.back())) name.pop_back();
  return name;
}

json read_index(const fs::path& path) {
  json index = json::parse(read_text(path), nullptr, false);
  TD_CHECK_AS(DataError, index.is_object() && index.contains("tensors"),
              "load_sharded_checkpoint: ", path.string(), " is not a checkpoint index");
  return index;
}

std::map<std::string, std::string> metadata_of(const json& index) {
  std::map<std::string, std::string> out;
  if (index.contains("metadata") && index["metadata"].is_object())
    for (const auto& [k, v] : index["metadata"].items())
      if (v.is_string()) out[k] = v.get<std::string>();
  return out;
}

DType dtype_named(const std::string& text, const std::string& key) {
  for (const DTypeInfo& d : kDTypes)
    if (text == d.name) return d.dtype;
  ::tandem::detail::fail<DataError>("load_sharded_checkpoint: \"", key, "\" has dtype \"", text,
                                    "\", which Tandem does not have");
}

}  // namespace

void save_sharded_checkpoint(const std::string& dir, int64_t step, FullyShardedModule& model,
                             const optim::Optimizer* optimizer,
                             const std::map<std::string, std::string>& metadata) {
  Communicator& group = model.group();
  const int64_t rank = group.rank(), world = group.size();
  const std::string step_name = str("step-", step);
  const fs::path where = fs::path(dir) / step_name;
  NoGradGuard no_grad;
  NamedTensorList mine;
  json index = {
      {"world", world}, {"step", step}, {"metadata", metadata}, {"tensors", json::object()}};
  std::map<const TensorImpl*, FullyShardedModule::LocalShard> by_impl;
  for (const auto& sh : model.local_shards()) {
    if (sh.shard.numel() > 0) mine.emplace_back("model." + sh.name, sh.shard);
    index["tensors"]["model." + sh.name] = entry(sh.whole, sh.shard.dtype(), true, world);
    by_impl[&sh.shard.impl()] = sh;
  }
  for (const auto& [name, b] : model.named_buffers()) {
    if (rank == 0) mine.emplace_back("model." + name, b);
    index["tensors"]["model." + name] = entry(b.shape(), b.dtype(), false, world);
  }
  if (optimizer) {
    const optim::OptimizerState state = optimizer->state_dict();
    const std::vector<Tensor> params = optimizer->parameters();
    for (const auto& [key, t] : state.tensors) {
      size_t j;
      std::string what;
      if (!optim::parse_state_key(key, j, what)) continue;
      const auto it = by_impl.find(&params.at(j).impl());
      TD_CHECK_VALUE(it != by_impl.end(), "save_sharded_checkpoint: the optimizer's parameter ", j,
                     " is not one of the model's shards");
      const bool sharded = t.dim() > 0;  // per element, shaped like the shard; else a scalar
      const std::string k = "optim." + it->second.name + "." + what;
      if ((sharded && t.numel() > 0) || (!sharded && rank == 0)) mine.emplace_back(k, t);
      index["tensors"][k] =
          entry(sharded ? it->second.whole : t.shape(), t.dtype(), sharded, world);
      index["tensors"][k]["param"] = it->second.name;
      index["tensors"][k]["state"] = what;
    }
    index["param_groups"] = state.param_groups_json;
  }
  // Every rank writes; then all learn whether all could, so that none waits on a failed one.
  std::string error;
  try {
    if (rank == 0) fs::create_directories(where);
    group.barrier()->wait();  // the directory exists
    save_safetensors((where / rank_file(rank, world)).string(), mine,
                     {{"step", std::to_string(step)}});
  } catch (const std::exception& e) {
    error = e.what();
  }
  Tensor failed =
      zeros({world}, {.device = mine.empty() ? Device::cpu() : mine[0].second.device()});
  if (!error.empty()) failed.narrow(0, rank, 1).fill_(1);
  group.all_reduce(failed)->wait();
  const std::vector<float> who = failed.to(Device::cpu()).to_vector<float>();
  std::string bad;
  for (int64_t r = 0; r < world; ++r)
    if (who[size_t(r)] > 0) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  TD_CHECK_AS(DataError, bad.empty(), "save_sharded_checkpoint: rank ", bad,
              " could not write its file of ", where.string(), error.empty() ? "" : ": " + error,
              "; ", (fs::path(dir) / "latest").string(), " still names the previous checkpoint");
  if (rank == 0) {
    write_text(where / "index.json", index.dump(1));
    write_text(fs::path(dir) / "latest", step_name);  // the commit
  }
  group.barrier()->wait();  // committed before any rank goes on
}

namespace {

// The step `dir/latest` names, read a row range at a time from whichever files hold the rows.
class StepReader {
 public:
  explicit StepReader(const std::string& dir)
      : where_(fs::path(dir) / latest_step(dir)),
        index_path_(where_ / "index.json"),
        index_(read_index(index_path_)) {}
  const json& index() const { return index_; }
  const fs::path& index_path() const { return index_path_; }

  // Rows [begin, begin + dst's rows) of tensor `key` into dst.
  void read_rows(const std::string& key, const Shape& whole, int64_t begin, Tensor dst) {
    TD_CHECK_AS(DataError, index_["tensors"].contains(key),
                "load_sharded_checkpoint: ", index_path_.string(), " has no \"", key, "\"");
    const json& e = index_["tensors"][key];
    const Shape saved = e["shape"].get<Shape>();
    TD_CHECK_AS(DataError, saved == whole, "load_sharded_checkpoint: \"", key, "\" is ", saved,
                " in ", index_path_.string(), ", ", whole, " in the model");
    const int64_t rows = rows_in(whole), row = rows == 0 ? 0 : numel(whole) / rows;
    const int64_t n = dst.numel() == 0 ? 0 : dst.numel() / std::max<int64_t>(row, 1);
    Tensor out = dst.reshape({n, row});
    int64_t copied = 0;
    for (const json& part : e["parts"]) {
      const int64_t b = part["rows"][0], end = part["rows"][1];
      const int64_t lo = std::max(b, begin), hi = std::min(end, begin + n);
      if (hi <= lo) continue;
      const std::string file = part["file"];
      auto it = files_.find(file);
      if (it == files_.end())
        it = files_.emplace(file, load_safetensors((where_ / file).string())).first;
      const Tensor src = it->second.at(key).reshape({end - b, row});
      out.narrow(0, lo - begin, hi - lo).copy_(src.narrow(0, lo - b, hi - lo));
      copied += hi - lo;
    }
    TD_CHECK_AS(DataError, copied == n, "load_sharded_checkpoint: rows ", begin, "..", begin + n,
                " of \"", key, "\" are not all in the files of ", where_.string());
    if (out.data_ptr() != dst.data_ptr()) dst.copy_(out.reshape(dst.shape()));  // not a view
  }

 private:
  fs::path where_, index_path_;
  json index_;
  std::map<std::string, SafetensorsFile> files_;  // read once each, when first needed
};

}  // namespace

int64_t load_sharded_checkpoint(const std::string& dir, FullyShardedModule& model,
                                optim::Optimizer* optimizer,
                                std::map<std::string, std::string>* metadata) {
  StepReader reader(dir);
  const json& index = reader.index();
  const fs::path& index_path = reader.index_path();
  NoGradGuard no_grad;
  auto read_rows = [&](const std::string& key, const Shape& whole, int64_t begin, Tensor dst) {
    reader.read_rows(key, whole, begin, std::move(dst));
  };
  std::map<std::string, const FullyShardedModule::LocalShard*> by_name;
  const auto shards = model.local_shards();
  for (const auto& sh : shards) {
    read_rows("model." + sh.name, sh.whole, sh.first_row, sh.shard);
    by_name[sh.name] = &sh;
  }
  for (auto& [name, b] : model.named_buffers()) read_rows("model." + name, b.shape(), 0, b);
  if (optimizer) {
    TD_CHECK_AS(DataError, index.contains("param_groups"),
                "load_sharded_checkpoint: ", index_path.string(), " holds no optimizer state");
    std::map<const TensorImpl*, std::string> name_of;
    for (const auto& sh : shards) name_of[&sh.shard.impl()] = sh.name;
    std::map<std::string, size_t> position;  // parameter name -> index in the optimizer
    const std::vector<Tensor> params = optimizer->parameters();
    for (size_t j = 0; j < params.size(); ++j)
      if (auto it = name_of.find(&params[j].impl()); it != name_of.end()) position[it->second] = j;
    optim::OptimizerState state{{}, index["param_groups"].get<std::string>()};
    for (const auto& [key, e] : index["tensors"].items()) {
      if (!e.contains("param")) continue;
      const std::string param = e["param"];
      TD_CHECK_AS(DataError, position.contains(param), "load_sharded_checkpoint: \"", key,
                  "\" is the state of ", param, ", which the optimizer does not hold");
      const auto& sh = *by_name.at(param);
      const Shape shape = e["shape"].get<Shape>();
      const bool sharded = shape == sh.whole && !shape.empty();
      Tensor t = empty(sharded ? sh.shard.shape() : shape,
                       {.dtype = dtype_named(e["dtype"], key), .device = sh.shard.device()});
      read_rows(key, shape, sharded ? sh.first_row : 0, t);
      state.tensors.emplace_back(str("state.", position[param], ".", std::string(e["state"])), t);
    }
    optimizer->load_state_dict(state);
  }
  if (metadata != nullptr) *metadata = metadata_of(index);
  return index["step"].get<int64_t>();
}

nn::StateDict load_sharded_model_state(const std::string& dir) {
  StepReader reader(dir);
  NoGradGuard no_grad;
  nn::StateDict state;
  for (const auto& [key, e] : reader.index()["tensors"].items()) {
    if (!key.starts_with("model.")) continue;
    const Shape shape = e["shape"].get<Shape>();
    Tensor t = empty(shape, {.dtype = dtype_named(e["dtype"], key)});
    reader.read_rows(key, shape, 0, t);
    state.emplace_back(key.substr(6), t);
  }
  return state;
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
