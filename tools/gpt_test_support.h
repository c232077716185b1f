// tools/gpt_test_support.h — what the end-to-end tests of `tandem train --model gpt` share: a
// small text (sentences of a few words, so that a few dozen iterations of a tiny GPT learn
// something), the flags of a tiny GPT, runs that checkpoint side by side and their comparison,
// and reading a loss back from the output.
#pragma once

#include <map>
#include <string>

#include "cli_test_support.h"

namespace tandem::cli_test {

inline void write_text(const fs::path& path, size_t sentences) {
  const char* words[] = {"the", "cat", "sat", "on",  "a",   "mat", "and", "dog",
                         "ran", "to",  "red", "big", "sun", "hid", "in",  "box"};
  data::SplitMix64 rng(3);
  std::ofstream out(path);
  for (size_t i = 0; i < sentences; ++i) {
    out << "The";
    for (uint64_t k = 0, n = 3 + rng.next() % 6; k < n; ++k) out << ' ' << words[rng.next() % 16];
    out << (i % 5 == 4 ? ".\n" : ". ");
  }
}

// A tiny GPT, a short run: 1 block, 2 heads, 16 wide, context 16, batch 8; `changes` replace
// or add flags ("--n-layer 2").
inline std::string gpt_flags(const fs::path& text, int iters,
                             const std::map<std::string, std::string>& changes = {}) {
  std::map<std::string, std::string> flags = {
      {"--text", text.string()}, {"--n-layer", "1"},      {"--n-head", "2"},
      {"--n-embd", "16"},        {"--block-size", "16"},  {"--batch-size", "8"},
      {"--lr", "1e-2"},          {"--warmup-iters", "2"}, {"--max-iters", std::to_string(iters)},
      {"--eval-interval", "20"}, {"--eval-iters", "4"},   {"--log-interval", "10"}};
  for (const auto& [flag, value] : changes) flags[flag] = value;
  std::string out = "train --model gpt";
  for (const auto& [flag, value] : flags) out += " " + flag + " " + value;
  return out;
}

// Runs of `tandem train --model gpt` (2 layers, no schedule) on one text, each checkpointing into
// a directory of its own, and their checkpoints compared.
struct CheckpointedRuns {
  TempDir tmp;
  const std::string two = "launch --standalone --nproc-per-node 2 -- " TANDEM_CLI " ",
                    four = "launch --standalone --nproc-per-node 4 -- " TANDEM_CLI " ";
  CheckpointedRuns() { write_text(tmp / "text.txt", 300); }

  Result run(const std::string& launcher, int iters, const std::string& dir,
             const std::string& extra, const std::string& dropout = "0") {
    const Result r = tandem_cli(launcher +
                                    gpt_flags(tmp / "text.txt", iters,
                                              {{"--n-layer", "2"},
                                               {"--schedule", "none"},
                                               {"--dropout", dropout},
                                               {"--eval-interval", "10"},
                                               {"--log-dir", (tmp / ("log-" + dir)).string()}}) +
                                    " --checkpoint " + (tmp / dir).string() + extra,
                                tmp / (dir + std::to_string(iters) + ".txt"));
    EXPECT_EQ(r.code, 0) << r.output;
    return r;
  }
  // Directories a and b hold `file`s with the same tensors, to float32 rounding.
  void expect_close(const std::string& a, const std::string& b, const char* file) {
    const SafetensorsFile x = load_safetensors((tmp / a / file).string());
    const SafetensorsFile y = load_safetensors((tmp / b / file).string());
    ASSERT_EQ(x.tensors.size(), y.tensors.size()) << a << " " << b << " " << file;
    for (const auto& [name, t] : x.tensors)
      EXPECT_LT(abs(t - y.at(name)).max().item(), 1e-4) << a << " vs " << b << ": " << name;
  }
};

// The loss of "step N: train loss A, val loss B" lines, by N.
inline double val_loss_at(const std::string& output, int step) {
  const std::string key = "step " + std::to_string(step) + ": train loss ";
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  const size_t val = output.find("val loss ", at);
  return std::stod(output.substr(val + 9));
}

}  // namespace tandem::cli_test
