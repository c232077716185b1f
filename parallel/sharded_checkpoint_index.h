// parallel/sharded_checkpoint_index.h — the on-disk index of a sharded checkpoint
// (sharded_checkpoint.h): where a step's files are, what `latest` names, and each part's
// placements as JSON. Shared by the writer and the reader; not a user-facing API.
#pragma once

#include <tandem/parallel/placed_elements.h>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::parallel::sharded_index {

std::string rank_file(int64_t rank, int64_t world);  // "rank-<r>-of-<N>.safetensors"

/// Writes `text` to `path` atomically (a temporary, then a rename).
void write_text(const std::filesystem::path& path, const std::string& text);
/// DataError naming `path` when it cannot be read.
std::string read_text(const std::filesystem::path& path);

/// The step directory `dir/latest` names ("step-<S>").
std::string latest_step(const std::string& dir);
/// The index of a step; DataError naming the file when it is not one.
nlohmann::json read_index(const std::filesystem::path& path);
std::map<std::string, std::string> metadata_of(const nlohmann::json& index);
DType dtype_named(const std::string& text, const std::string& key);

/// A part's placements: [{"shard": [dim, blocks, padding], "ranks": n, "at": r},
/// {"piece": [begin, length], "ranks": n, "at": r}, ...].
nlohmann::json to_json(const std::vector<AppliedPlacement>& chain);
/// The inverse, for tensor `key` of `whole` shape; also reads the first format's
/// {"rows": [begin, end]} (fully_shard's row ranges) as the piece of those rows. DataError
/// naming `index` for JSON that is neither.
std::vector<AppliedPlacement> placements_of_part(const nlohmann::json& part, const Shape& whole,
                                                 const std::string& key,
                                                 const std::filesystem::path& index);

}  // namespace tandem::parallel::sharded_index
