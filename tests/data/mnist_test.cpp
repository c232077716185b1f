// The MNIST dataset over small synthetic directories written with write_idx_*: shapes, pixel
// normalisation, .gz files, and the errors for missing, corrupt and inconsistent files. One test
// reads the real Fashion-MNIST when the Debian package is installed.
#include <tandem/data/dataloader.h>
#include <tandem/data/idx.h>
#include <tandem/data/mnist.h>

#include <filesystem>

#include "support/expect.h"
#include "temp_dir.h"

using namespace tandem;
using namespace tandem::data;
using tandem::testing::error_message;
using tandem::testing::TempDir;
using ::testing::HasSubstr;

namespace {

// Image i is filled with pixel value 10 * i + 5; its label is i % 10.
void write_split(const TempDir& dir, Split split, int64_t n, const std::string& suffix = "") {
  IdxImages im{.count = n, .rows = 28, .cols = 28, .pixels = {}};
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) {
    im.pixels.insert(im.pixels.end(), 784, uint8_t(10 * i + 5));
    labels.push_back(i % 10);
  }
  write_idx_images(dir.file(MNIST::images_file(split) + suffix), im);
  write_idx_labels(dir.file(MNIST::labels_file(split) + suffix), labels);
}

}  // namespace

TEST(MNIST, LoadsImagesAsNormalisedFloatsAndLabelsAsInt64) {
  const TempDir dir;
  write_split(dir, Split::Train, 12);
  const MNIST ds(dir.str());
  EXPECT_EQ(ds.size(), 12);
  EXPECT_EQ(ds.images().shape(), Shape({12, 1, 28, 28}));
  EXPECT_EQ(ds.images().dtype(), kFloat32);
  EXPECT_EQ(ds.labels().shape(), Shape({12}));
  EXPECT_EQ(ds.labels().dtype(), kInt64);
  auto [x, y] = ds.get(3);
  EXPECT_EQ(x.shape(), Shape({1, 28, 28}));
  EXPECT_NEAR(x.to_vector<double>()[100], (35 / 255.0 - kMnistMean) / kMnistStd, 1e-6);
  EXPECT_EQ(y.shape(), Shape({}));
  EXPECT_EQ(y.item(), 3);
}

TEST(MNIST, WithoutNormalisationPixelsAreScaledToZeroOne) {
  const TempDir dir;
  write_split(dir, Split::Test, 3);
  const MNIST ds(dir.str(), Split::Test, {.normalize = false});
  EXPECT_NEAR(ds.images().max().item(), 25 / 255.0, 1e-7);
  EXPECT_NEAR(ds.images().min().item(), 5 / 255.0, 1e-7);
}

TEST(MNIST, GetBatchGathersImagesAndLabels) {
  const TempDir dir;
  write_split(dir, Split::Train, 12);
  const MNIST ds(dir.str(), Split::Train, {.normalize = false});
  const Batch b = ds.get_batch({11, 0, 4});
  EXPECT_EQ(b.x.shape(), Shape({3, 1, 28, 28}));
  EXPECT_EQ(b.y.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 4}));
  EXPECT_NEAR(b.x.to_vector<double>()[784 * 2], 45 / 255.0, 1e-7);
  DataLoader loader(ds, {.batch_size = 5, .shuffle = true});
  int64_t total = 0;
  for (auto& [x, y] : loader) {
    EXPECT_EQ(x.shape(), Shape({y.size(0), 1, 28, 28}));
    total += y.size(0);
  }
  EXPECT_EQ(total, 12);
}

TEST(MNIST, ReadsGzippedFiles) {
  const TempDir dir;
  write_split(dir, Split::Test, 4, ".gz");
  const MNIST ds(dir.str(), Split::Test);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.labels().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(MNIST, MissingFilesNameTheDirectoryTheFourFilesAndTheFix) {
  const TempDir dir;
  write_split(dir, Split::Train, 2);  // the training split alone loads
  EXPECT_EQ(MNIST(dir.str(), Split::Train).size(), 2);
  const std::string msg = error_message<DataError>([&] { MNIST(dir.str(), Split::Test); });
  EXPECT_THAT(msg, HasSubstr(dir.str()));
  EXPECT_THAT(msg, HasSubstr("has no t10k-images-idx3-ubyte[.gz] and t10k-labels-idx1-ubyte"));
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    EXPECT_THAT(msg, HasSubstr(name));
  EXPECT_THAT(msg, HasSubstr("tandem fetch mnist"));
  EXPECT_THAT(msg, HasSubstr("apt-get install dataset-fashion-mnist"));
  EXPECT_THAT(msg, HasSubstr("--dataset DIR"));
}

TEST(MNIST, AMissingDirectoryIsNamed) {
  const std::string msg =
      error_message<DataError>([] { MNIST("/nonexistent/mnist-dir", Split::Train); });
  EXPECT_THAT(msg, HasSubstr("/nonexistent/mnist-dir"));
  EXPECT_THAT(msg, HasSubstr("train-images-idx3-ubyte"));
}

TEST(MNIST, ImagesAndLabelsOfDifferentCountsAreADataError) {
  const TempDir dir;
  write_split(dir, Split::Train, 5);
  write_idx_labels(dir.file(MNIST::labels_file(Split::Train)), {1, 2, 3, 4});
  const std::string msg = error_message<DataError>([&] { MNIST(dir.str()); });
  EXPECT_THAT(msg, HasSubstr("size mismatch"));
  EXPECT_THAT(msg, HasSubstr("holds 5 images"));
  EXPECT_THAT(msg, HasSubstr("holds 4 labels"));
  EXPECT_THAT(msg, HasSubstr(dir.file("train-images-idx3-ubyte")));
  EXPECT_THAT(msg, HasSubstr(dir.file("train-labels-idx1-ubyte")));
}

TEST(MNIST, ALabelOutsideZeroToNineNamesItsIndexAndValue) {
  const TempDir dir;
  write_split(dir, Split::Train, 3);
  write_idx_labels(dir.file(MNIST::labels_file(Split::Train)), {1, 12, 3});
  const std::string msg = error_message<DataError>([&] { MNIST(dir.str()); });
  EXPECT_THAT(msg, HasSubstr("label 12 at index 1"));
  EXPECT_THAT(msg, HasSubstr(dir.file("train-labels-idx1-ubyte")));
}

TEST(MNIST, ACorruptFileIsReportedAsMnistNamingTheFile) {
  const TempDir dir;
  write_split(dir, Split::Train, 3);
  const std::string images = dir.file(MNIST::images_file(Split::Train));
  tandem::testing::write_bytes(images, std::string(20, '\0'));
  EXPECT_THAT(error_message<DataError>([&] { MNIST(dir.str()); }),
              HasSubstr("MNIST: " + images +
                        ": bad magic 0x00000000 (expected 0x00000803): "
                        "not an IDX image file, or truncated"));
}

TEST(MNIST, RejectsANonPositiveStd) {
  const TempDir dir;
  write_split(dir, Split::Train, 1);
  EXPECT_THROW(MNIST(dir.str(), Split::Train, {.std = 0}), ValueError);
}

TEST(MNIST, FashionMnistFromTheDebianPackageIsCompleteAndBalanced) {
  if (!std::filesystem::is_directory(kFashionMnistDir))
    GTEST_SKIP() << kFashionMnistDir << " is missing (apt-get install dataset-fashion-mnist)";
  const MnistOptions raw{.normalize = false};
  const MNIST train(kFashionMnistDir, Split::Train, raw), test(kFashionMnistDir, Split::Test, raw);
  ASSERT_EQ(train.size(), 60000);
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(train.images().shape(), Shape({60000, 1, 28, 28}));
  std::vector<int64_t> train_count(10), test_count(10);
  for (int64_t y : train.labels().to_vector<int64_t>()) ++train_count[size_t(y)];
  for (int64_t y : test.labels().to_vector<int64_t>()) ++test_count[size_t(y)];
  EXPECT_EQ(train_count, std::vector<int64_t>(10, 6000));
  EXPECT_EQ(test_count, std::vector<int64_t>(10, 1000));
  EXPECT_NEAR(train.images().mean().item(), kFashionMnistMean, 5e-4);
  // Normalised with its own statistics, the training set has mean ~0 and std ~1.
  const MNIST normed(kFashionMnistDir, Split::Train,
                     {.mean = kFashionMnistMean, .std = kFashionMnistStd});
  const Tensor x = normed.images();
  EXPECT_NEAR(x.mean().item(), 0.0, 2e-3);
  EXPECT_NEAR((x * x).mean().item(), 1.0, 5e-3);
}
