// tests/core/safetensors_util.h — helpers for the safetensors tests: a scratch directory removed
// afterwards, whole-file reads and writes, and hand-built files (a header text and a data buffer)
// for the corruption tests.
#pragma once

#include <tandem/core/serialize/safetensors.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <vector>
#include "support/bytes.h"

#include <unistd.h>

namespace tandem::testing {

/// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("tandem-safetensors-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }
  /// Names of the entries in the directory, sorted (to spot leftover temporary files).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

/// The 8-byte little-endian header size.
inline std::string u64_le(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out;
}

/// A safetensors file from raw parts: size field (the header's length by default), header, data.
inline std::string make_file(const std::string& header, const std::string& data,
                             int64_t header_size = -1) {
  const uint64_t n = header_size < 0 ? header.size() : uint64_t(header_size);
  return u64_le(n) + header + data;
}

/// `count` float32 values 0, 1, 2, ... as little-endian bytes.
inline std::string f32_bytes(int count) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    const float v = float(i);
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  return out;
}

}  // namespace tandem::testing
