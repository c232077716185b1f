// parallel/sharded_checkpoint_load.cpp — reading a step back under any layout: for each tensor
// this rank holds, the whole's elements it needs (its placements, applied to the whole's indices),
// copied from every part that holds them (each part's placements, the same way).
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/sharded_checkpoint_index.h>
#include <cstring>

namespace tandem::parallel {
namespace fs = std::filesystem;
using nlohmann::json;
using namespace sharded_index;
namespace {

// The step `dir/latest` names; its files read once each, when first needed.
class StepReader {
 public:
  explicit StepReader(const std::string& dir)
      : where_(fs::path(dir) / latest_step(dir)),
        index_path_(where_ / "index.json"),
        index_(read_index(index_path_)) {}
  const json& index() const { return index_; }
  const fs::path& index_path() const { return index_path_; }

  // Tensor `key` (of `whole` shape) cut by `chain` into dst (dst.numel() elements: a chain's
  // trailing padding may be left out, as fully_shard's last rows are).
  void read(const std::string& key, const Shape& whole, const std::vector<AppliedPlacement>& chain,
            Tensor dst) {
    TD_CHECK_AS(DataError, index_["tensors"].contains(key),
                "load_sharded_checkpoint: ", index_path_.string(), " has no \"", key, "\"");
    const json& e = index_["tensors"][key];
    const Shape saved = e["shape"].get<Shape>();
    TD_CHECK_AS(DataError, saved == whole, "load_sharded_checkpoint: \"", key, "\" is ", saved,
                " in ", index_path_.string(), ", ", whole, " in the model");
    const std::vector<int64_t> want = held_elements(whole, chain, dst.numel(), key);
    // Which elements of the whole are wanted, and where each goes in dst.
    std::vector<int64_t> slot(size_t(numel(whole)), -1);
    for (size_t i = 0; i < want.size(); ++i)
      if (want[i] >= 0) slot[size_t(want[i])] = int64_t(i);
    const DType dtype = dtype_named(e["dtype"], key);
    const size_t size = element_size(dtype);
    Tensor out = zeros({int64_t(want.size())}, {.dtype = dtype});  // padding stays zero
    char* o = static_cast<char*>(out.data_ptr());
    std::vector<bool> found(want.size(), false);
    for (const json& part : e["parts"]) {
      const std::string file = part.value("file", "");
      const std::vector<int64_t> held =
          whole_elements(whole, placements_of_part(part, whole, key, index_path_), key);
      const Tensor src = file_tensor(file, key);
      TD_CHECK_AS(DataError, src.numel() <= int64_t(held.size()) && src.dtype() == dtype,
                  "load_sharded_checkpoint: \"", key, "\" in ", (where_ / file).string(),
                  " is not the part its index describes (", src.numel(), " elements of ",
                  name(src.dtype()), ")");
      const char* s = static_cast<const char*>(src.data_ptr());
      for (int64_t i = 0; i < src.numel(); ++i) {
        const int64_t w = held[size_t(i)];
        if (w < 0 || slot[size_t(w)] < 0) continue;
        std::memcpy(o + size_t(slot[size_t(w)]) * size, s + size_t(i) * size, size);
        found[size_t(slot[size_t(w)])] = true;
      }
    }
    for (size_t i = 0; i < want.size(); ++i)
      TD_CHECK_AS(DataError, want[i] < 0 || found[i], "load_sharded_checkpoint: element ", want[i],
                  " of \"", key, "\" is in none of the files of ", where_.string());
    dst.copy_(out.reshape(dst.shape()));
  }

 private:
  Tensor file_tensor(const std::string& file, const std::string& key) {
    auto it = files_.find(file);
    if (it == files_.end())
      it = files_.emplace(file, load_safetensors((where_ / file).string())).first;
    return it->second.at(key).contiguous();
  }

  fs::path where_, index_path_;
  json index_;
  std::map<std::string, SafetensorsFile> files_;
};

// The saved param groups' settings, with `optimizer`'s own parameter lists.
std::string regrouped(const json& index, const optim::Optimizer& optimizer, const fs::path& path) {
  TD_CHECK_AS(DataError, index.contains("param_groups"), "load_sharded_checkpoint: ", path.string(),
              " holds no optimizer state");
  json saved = json::parse(index["param_groups"].get<std::string>());
  const json mine = json::parse(optimizer.state_dict().param_groups_json);
  TD_CHECK_AS(DataError, saved.is_array() && saved.size() == mine.size(),
              "load_sharded_checkpoint: ", path.string(), " holds ", saved.size(),
              " parameter groups, the optimizer has ", mine.size());
  for (size_t g = 0; g < saved.size(); ++g) saved[g]["params"] = mine[g].at("params");
  return saved.dump();
}

}  // namespace

int64_t load_sharded_checkpoint(const std::string& dir, const PlacementTable& table,
                                const nn::StateDict& buffers, optim::Optimizer* optimizer,
                                std::map<std::string, std::string>* metadata) {
  StepReader reader(dir);
  const json& index = reader.index();
  NoGradGuard no_grad;
  for (const PlacedTensor& e : table.entries())
    reader.read("model." + e.name, e.whole, applied_placements(e, table), e.local);
  for (const auto& [name, b] : buffers) reader.read("model." + name, b.shape(), {}, b);
  if (optimizer) {
    std::map<std::string, std::vector<std::string>> keys_of;  // parameter name -> state keys
    for (const auto& [key, e] : index["tensors"].items())
      if (e.contains("param")) keys_of[e["param"].get<std::string>()].push_back(key);
    optim::OptimizerState state{{}, regrouped(index, *optimizer, reader.index_path())};
    const std::vector<Tensor> params = optimizer->parameters();
    for (size_t j = 0; j < params.size(); ++j) {
      const PlacedTensor* p = table.find(params[j]);
      TD_CHECK_VALUE(p != nullptr, "load_sharded_checkpoint: the optimizer's parameter ", j,
                     " is not in the placement table (", table.str(), ")");
      for (const std::string& key : keys_of[p->name]) {
        const json& e = index["tensors"][key];
        const Shape shape = e["shape"].get<Shape>();
        // Saved as the parameter is cut (Adam's moments), or whole (its step); the first format
        // said so by the shape alone.
        const bool per_element = e.value("per_element", shape == p->whole && !shape.empty());
        Tensor t = empty(per_element ? p->local.shape() : shape,
                         {.dtype = dtype_named(e["dtype"], key), .device = p->local.device()});
        reader.read(key, shape,
                    per_element ? applied_placements(*p, table) : std::vector<AppliedPlacement>{},
                    t);
        state.tensors.emplace_back(str("state.", j, ".", e["state"].get<std::string>()), t);
      }
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
    reader.read(key, shape, {}, t);
    state.emplace_back(key.substr(6), t);
  }
  return state;
}

}  // namespace tandem::parallel
