// core/serialize/safetensors.h — Tandem's checkpoint format: safetensors (Hugging Face), readable
// by PyTorch, transformers and every other safetensors reader. An 8-byte little-endian header
// size N, N bytes of JSON naming each tensor's dtype, shape and byte range, then the packed
// row-major little-endian data. Saves are atomic (core/serialize/atomic_file.h); loads check every
// validity rule of the spec and name the file and tensor when one fails.
#pragma once

#include <tandem/core/tensor.h>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

/// (name, tensor) pairs, in the order a state dict lists them.
using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

/// Writes `tensors` (float32, float64, int64 or bool; any device or layout) and the string map
/// `metadata` (stored as `__metadata__`; model checkpoints pass {{"format", "pt"}}, which
/// transformers requires) to `path`, byte for byte as the reference writer does. The file is
/// replaced atomically: a crash leaves the old file or the new one. ValueError for duplicate,
/// reserved ("__metadata__") or non-UTF-8 names and undefined tensors; Error naming the path and
/// the errno text when the file cannot be written.
void save_safetensors(const std::string& path, const NamedTensorList& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// The contents of a safetensors file.
struct SafetensorsFile {
  std::string path;         // where it was read from, for messages
  NamedTensorList tensors;  // in file order (by data offset)
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`; DataError naming the file and the name when there is none.
  const Tensor& at(std::string_view name) const;
  /// Whether a tensor called `name` is present.
  bool contains(std::string_view name) const;
};

/// Reads a safetensors file onto `device`. DataError naming the file (and the tensor, where one
/// is at fault) when it is truncated, corrupt, or holds a dtype Tandem does not support; Error
/// when it cannot be opened.
SafetensorsFile load_safetensors(const std::string& path, Device device = Device());

}  // namespace tandem
