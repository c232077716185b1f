// core/serialize/safetensors_header.cpp — writes and validates the JSON header of a safetensors
// file. The writer matches the reference (safetensors/src/tensor.rs, `prepare`): compact JSON,
// `__metadata__` first, each entry's keys in the order dtype, shape, data_offsets, then spaces up
// to a multiple of 8 bytes. The reader enforces every rule of the spec, and also catches duplicate
// keys, which JSON libraries (nlohmann, serde, Python's json) silently resolve to the last one.
#include <tandem/core/check.h>
#include <tandem/core/serialize/safetensors_header.h>
#include <algorithm>
#include <array>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace tandem::detail {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;  // keeps insertion order, which the byte-exact layout needs

// Every dtype of the spec: one Tandem cannot hold is "unsupported", anything else "unknown".
constexpr std::array<std::string_view, 22> kSpecDTypes = {
    "BOOL",    "U8",  "I8",          "I16",         "U16",     "F16",    "BF16",    "I32",
    "U32",     "F32", "F64",         "I64",         "U64",     "C64",    "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F4",  "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F6_E2M3", "F6_E3M2"};

// The error helpers: every message starts with `where` ("load_safetensors: <path>").
template <typename... Args>
[[noreturn]] void bad(const std::string& where, const Args&... args) {
  throw DataError(str(where, ": ", args...));
}
template <typename... Args>
[[noreturn]] void bad_tensor(const std::string& where, const std::string& name,
                             const Args&... args) {
  throw DataError(str(where, ": tensor \"", name, "\": ", args...));
}

// Parses `text` as JSON, refusing duplicate keys at any depth. nlohmann keeps the last of two
// equal keys without a word; its parser callback sees every key before that happens.
json parse_strict(std::string_view text, const std::string& where) {
  struct Scope {
    std::string owner;  // the key whose value this object is ("" for the root)
    std::string last_key;
    std::set<std::string> keys;
  };
  std::vector<Scope> scopes;
  auto on_event = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      scopes.push_back({scopes.empty() ? "" : scopes.back().last_key, "", {}});
    } else if (event == json::parse_event_t::object_end) {
      scopes.pop_back();
    } else if (event == json::parse_event_t::key) {
      Scope& s = scopes.back();
      s.last_key = parsed.get<std::string>();
      if (!s.keys.insert(s.last_key).second) {
        if (scopes.size() == 1)
          bad(where, "duplicate key \"", s.last_key, "\" in the header (a name used twice; ",
              "JSON readers would silently keep the last one)");
        bad(where, "duplicate key \"", s.last_key, "\" in the entry of \"", s.owner, "\"");
      }
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), on_event);
  } catch (const json::exception& e) {
    bad(where, "header is not valid JSON: ", e.what());
  }
}

bool is_utf8(const std::string& s) {
  try {
    (void)json(s).dump();  // the strict error handler throws on invalid UTF-8
    return true;
  } catch (const json::type_error&) {
    return false;
  }
}

const char* json_kind(const json& j) { return j.type_name(); }  // "number", "array", ...

DType parse_dtype(const json& j, const std::string& where, const std::string& name) {
  if (!j.is_string()) bad_tensor(where, name, "dtype is a ", json_kind(j), ", not a string");
  const std::string& s = j.get_ref<const std::string&>();
  for (const DTypeInfo& t : kDTypes)
    if (t.safetensors == s) return t.dtype;
  if (std::find(kSpecDTypes.begin(), kSpecDTypes.end(), s) != kSpecDTypes.end()) {
    std::string supported;  // only on the way to the error: a load parses every tensor's dtype
    for (const DTypeInfo& t : kDTypes)
      supported += (supported.empty() ? "" : ", ") + std::string(t.safetensors);
    bad_tensor(where, name, "dtype ", s, " is not supported by Tandem (", supported, ")");
  }
  bad_tensor(where, name, "unknown dtype \"", s, "\"");
}

uint64_t parse_count(const json& j, const std::string& where, const std::string& name,
                     const char* field) {
  if (!j.is_number_unsigned())
    bad_tensor(where, name, field, " holds ", j.dump(), ", not a non-negative integer");
  return j.get<uint64_t>();
}

// One tensor's entry: the three fields, and END - BEGIN = numel x element size.
SafetensorsEntry parse_entry(const std::string& name, const json& e, const std::string& where) {
  if (!e.is_object())
    bad_tensor(where, name, "entry is a ", json_kind(e),
               ", not an object {\"dtype\", \"shape\", \"data_offsets\"}");
  auto field = [&](const char* key) -> const json& {
    auto it = e.find(key);
    if (it == e.end()) bad_tensor(where, name, "missing field \"", key, "\"");
    return *it;
  };
  SafetensorsEntry out;
  out.name = name;
  out.dtype = parse_dtype(field("dtype"), where, name);
  const json& shape = field("shape");
  if (!shape.is_array()) bad_tensor(where, name, "shape is a ", json_kind(shape), ", not a list");
  // The element count must fit int64 (Tandem's sizes) and the byte count uint64, or a crafted
  // header could make a huge tensor look small.
  uint64_t numel = 1;
  for (const json& d : shape) {
    const uint64_t size = parse_count(d, where, name, "shape");
    if (size > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, size, &numel) ||
        numel > uint64_t(INT64_MAX))
      bad_tensor(where, name, "shape ", shape.dump(), " has too many elements");
    out.shape.push_back(int64_t(size));
  }
  const json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2)
    bad_tensor(where, name, "data_offsets is ", offsets.dump(), ", not [BEGIN, END]");
  out.begin = parse_count(offsets[0], where, name, "data_offsets");
  out.end = parse_count(offsets[1], where, name, "data_offsets");
  if (out.end < out.begin)
    bad_tensor(where, name, "data_offsets [", out.begin, ", ", out.end, "] end before they begin");
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, uint64_t(element_size(out.dtype)), &nbytes))
    bad_tensor(where, name, "shape ", out.shape, " has too many elements");
  if (out.end - out.begin != nbytes)
    bad_tensor(where, name, "data_offsets [", out.begin, ", ", out.end, "] hold ",
               out.end - out.begin, " bytes but shape ", out.shape, " ", out.dtype, " needs ",
               nbytes);
  return out;
}

std::map<std::string, std::string> parse_metadata(const json& m, const std::string& where) {
  std::map<std::string, std::string> out;
  if (m.is_null()) return out;  // serde reads `null` as "no metadata"; so do we
  if (!m.is_object())
    bad(where, "__metadata__ is a ", json_kind(m), "; it must be a map of strings to strings");
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string())
      bad(where, "__metadata__ value of \"", key, "\" is a ", json_kind(value), " (", value.dump(),
          "); safetensors metadata holds only strings (store JSON as a string)");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Sorted by offset, the tensors must tile [0, buffer_size) with no hole and no overlap: a hole
// is unaccounted bytes (a sign of corruption), an overlap lets two tensors alias.
void check_tiling(const std::vector<SafetensorsEntry>& entries, uint64_t buffer_size,
                  const std::string& where) {
  uint64_t expected = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin < expected)
      bad_tensor(where, e.name, "data_offsets [", e.begin, ", ", e.end, "] overlap tensor \"",
                 prev->name, "\" [", prev->begin, ", ", prev->end, "]");
    if (e.begin > expected)
      bad_tensor(where, e.name, "data_offsets [", e.begin, ", ", e.end, "] leave bytes [", expected,
                 ", ", e.begin, ") of the data buffer unused ",
                 prev ? str("after tensor \"", prev->name, "\"") : std::string("at its start"));
    expected = e.end;
    prev = &e;
  }
  if (expected > buffer_size)
    bad(where, "truncated: the header describes ", expected, " bytes of tensor data but the file ",
        "holds only ", buffer_size, " (", expected - buffer_size, " bytes missing)");
  if (expected < buffer_size)
    bad(where, buffer_size - expected, " bytes of trailing data after the last tensor (the ",
        "header describes ", expected, " bytes of tensor data, the file holds ", buffer_size, ")");
}

}  // namespace

std::string_view safetensors_dtype(DType dtype) { return info(dtype).safetensors; }

std::string format_safetensors_header(const std::vector<SafetensorsEntry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
  // Names and metadata are checked up front so the error can say which one is not UTF-8.
  for (const SafetensorsEntry& e : entries)
    TD_CHECK_VALUE(is_utf8(e.name), "save_safetensors: tensor name \"", e.name,
                   "\" is not valid UTF-8 (JSON headers hold UTF-8 text)");
  for (const auto& [key, value] : metadata)
    TD_CHECK_VALUE(is_utf8(key) && is_utf8(value), "save_safetensors: metadata entry \"", key,
                   "\" is not valid UTF-8 (JSON headers hold UTF-8 text)");
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const SafetensorsEntry& e : entries) {
    ordered_json entry = ordered_json::object();
    entry["dtype"] = safetensors_dtype(e.dtype);
    entry["shape"] = ordered_json::array();
    for (int64_t d : e.shape) entry["shape"].push_back(uint64_t(d));
    entry["data_offsets"] = ordered_json::array({e.begin, e.end});
    header[e.name] = std::move(entry);
  }
  std::string text = header.dump();  // compact, UTF-8 kept as is: what serde_json writes
  // Spaces up to a multiple of 8 keep every tensor's data 8-byte aligned in a mapped file.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t buffer_size,
                                           const std::string& where) {
  // The spec says the header starts with '{'; readers tolerate leading whitespace.
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start == std::string_view::npos || text[start] != '{')
    bad(where, "the header does not start with '{' (not a safetensors file, or corrupt)");
  const json root = parse_strict(text.substr(start), where);

  SafetensorsHeader out;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__")
      out.metadata = parse_metadata(value, where);
    else
      out.entries.push_back(parse_entry(key, value, where));
  }
  // Files need not follow the writer's order: sort by offset (empty tensors first at a tie).
  std::sort(out.entries.begin(), out.entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  check_tiling(out.entries, buffer_size, where);
  return out;
}

}  // namespace tandem::detail
