// tests/fuzz/fuzz_util.h — what the fuzz targets share: the readers under test take a path, so
// each input is written to a file in a private directory (in /dev/shm when there is one: no disk).
#pragma once

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tandem::fuzz {

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string tmpl = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    tmpl += "/tandem-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

/// Writes `size` bytes to scratch_dir()/name and returns the path.
inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0)
    std::abort();
  return path;
}

}  // namespace tandem::fuzz
