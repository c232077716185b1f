// parallel/sharded_checkpoint_index.cpp — the index's files and JSON.
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/parallel/sharded_checkpoint_index.h>
#include <cctype>
#include <fstream>
#include <sstream>

namespace tandem::parallel::sharded_index {
namespace fs = std::filesystem;
using nlohmann::json;

std::string rank_file(int64_t rank, int64_t world) {
  return str("rank-", rank, "-of-", world, ".safetensors");
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

json to_json(const std::vector<AppliedPlacement>& chain) {
  json out = json::array();
  for (const AppliedPlacement& a : chain) {
    json j = {{"ranks", a.ranks}, {"at", a.at}};
    if (const auto* s = std::get_if<Shard>(&a.how))
      j["shard"] = {s->dim, s->blocks, s->padding};
    else if (const auto* p = std::get_if<Piece>(&a.how))
      j["piece"] = {p->begin, p->length};
    else
      continue;  // Replicate and Partial cut nothing
    out.push_back(j);
  }
  return out;
}

std::vector<AppliedPlacement> placements_of_part(const json& part, const Shape& whole,
                                                 const std::string& key, const fs::path& index) {
  const auto bad = [&] {
    ::tandem::detail::fail<DataError>("load_sharded_checkpoint: a part of \"", key, "\" in ",
                                      index.string(),
                                      " is not a list of placements: ", part.dump());
  };
  if (part.contains("rows")) {  // the first format: fully_shard's rows [begin, end)
    const json& r = part["rows"];
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
      bad();
    const int64_t rows = whole.empty() ? 1 : whole[0], row = rows == 0 ? 0 : numel(whole) / rows;
    const int64_t b = r[0], e = r[1];
    return {{Piece{.begin = b * row, .length = (e - b) * row}, 1, 0}};
  }
  if (!part.contains("placements") || !part["placements"].is_array()) bad();
  std::vector<AppliedPlacement> chain;
  for (const json& j : part["placements"]) {
    if (!j.is_object() || !j.contains("ranks") || !j.contains("at")) bad();
    const char* kind = j.contains("shard") ? "shard" : j.contains("piece") ? "piece" : nullptr;
    if (kind == nullptr || !j[kind].is_array()) bad();
    std::vector<int64_t> v;
    for (const json& x : j[kind]) {
      if (!x.is_number_integer()) bad();
      v.push_back(x.get<int64_t>());
    }
    if (v.size() != (kind[0] == 's' ? 3u : 2u) || !j["ranks"].is_number_integer() ||
        !j["at"].is_number_integer())
      bad();
    const Placement how = kind[0] == 's' ? Placement(Shard{v[0], v[1], v[2]})
                                         : Placement(Piece{.begin = v[0], .length = v[1]});
    chain.push_back({how, j["ranks"].get<int64_t>(), j["at"].get<int64_t>()});
  }
  return chain;
}

}  // namespace tandem::parallel::sharded_index
