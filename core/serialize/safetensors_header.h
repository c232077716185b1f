// core/serialize/safetensors_header.h — the JSON half of safetensors (internal): writing the
// header text exactly as the reference writer does, and parsing and validating a header read
// from a file. Kept apart from the file I/O in safetensors.cpp so nlohmann/json stays in one
// translation unit and the validity rules can be read in one place.
#pragma once

#include <tandem/core/dtype.h>
#include <tandem/core/shape.h>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::detail {

/// One tensor as the header describes it; [begin, end) is relative to the data buffer.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by data offset
  std::map<std::string, std::string> metadata;
};

/// "F32", "F64", "I64", "BOOL".
std::string_view safetensors_dtype(DType dtype);

/// The header JSON for `entries` (already in layout order, offsets filled in), padded with
/// spaces to a multiple of 8 bytes. ValueError naming the tensor when a name is not UTF-8.
std::string format_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata);

/// Parses and validates the header `text` of a file whose data buffer holds `buffer_size` bytes.
/// Every rule of the spec is checked; a failure throws DataError whose message starts with
/// `where` ("load_safetensors: <path>") and names the tensor at fault.
SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t buffer_size,
                                           const std::string& where);

}  // namespace tandem::detail
