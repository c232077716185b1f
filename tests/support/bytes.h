// tests/support/bytes.h — a whole file as bytes and back, for the tests that write or damage
// files (safetensors, datasets, checkpoints). One definition, so test files that reach it through
// different headers can share a unity batch.
#pragma once

#include <fstream>
#include <iterator>
#include <string>

namespace tandem::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace tandem::testing
