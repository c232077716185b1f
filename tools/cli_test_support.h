// tools/cli_test_support.h — what the end-to-end tests of the `tandem` command share: a temporary
// directory, running the built binary as a user would (std::system, output through a file), and
// comparing two safetensors files byte for byte.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <tandem/tandem.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tandem::cli_test {
namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tandem-cli-test-XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Result {
  int code;
  std::string output;  // stdout and stderr together
};

// Runs `tandem <args>`; the output goes through a file so it can be checked.
inline Result tandem_cli(const std::string& args, const fs::path& log) {
  // TANDEM_CLI_PATH overrides the build's path: tools/gpu-check.sh runs these from a bundle.
  const char* path = std::getenv("TANDEM_CLI_PATH");
  const std::string cmd = std::string(path != nullptr ? path : TANDEM_CLI) + " " + args + " > '" +
                          log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Every tensor of two safetensors files, byte for byte.
inline void expect_same_tensors(const fs::path& a, const fs::path& b) {
  const SafetensorsFile fa = load_safetensors(a.string()), fb = load_safetensors(b.string());
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const auto& [name, t] : fa.tensors) {
    ASSERT_TRUE(fb.contains(name)) << name;
    const Tensor& u = fb.at(name);
    ASSERT_EQ(t.shape(), u.shape()) << name;
    ASSERT_EQ(t.dtype(), u.dtype()) << name;
    const Tensor tc = t.contiguous(), uc = u.contiguous();
    EXPECT_EQ(std::memcmp(tc.data_ptr(), uc.data_ptr(), tc.nbytes()), 0)
        << name << " differs between " << a << " and " << b;
  }
}

// Random images whose mean brightness depends on the label, so a few steps can learn something.
inline void write_split(const fs::path& dir, const std::string& prefix, int64_t n, uint64_t seed) {
  data::SplitMix64 rng(seed);
  data::IdxImages images{.count = n, .rows = 28, .cols = 28, .pixels = {}};
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    labels[size_t(i)] = int64_t(rng.next() % 10);
    for (int p = 0; p < 28 * 28; ++p)
      images.pixels.push_back(uint8_t((rng.next() % 128) + uint64_t(labels[size_t(i)]) * 12));
  }
  data::write_idx_images((dir / (prefix + "-images-idx3-ubyte")).string(), images);
  data::write_idx_labels((dir / (prefix + "-labels-idx1-ubyte")).string(), labels);
}

// A tiny synthetic IDX dataset (256 train / 64 test random 28×28 images): no download needed.
inline void write_synthetic_dataset(const fs::path& dir) {
  fs::create_directories(dir);
  write_split(dir, "train", 256, 1);
  write_split(dir, "t10k", 64, 2);
}

}  // namespace tandem::cli_test
