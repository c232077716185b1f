// data/dataset.h — what a dataset is: a size and a way to get example i, as torch.utils.data's
// map-style Dataset. get_batch builds a whole batch at once; the default stacks get(i) results,
// and datasets held in one tensor (TensorDataset, MNIST) override it with a row gather.
// Datasets are read from DataLoader worker threads concurrently, so get() and get_batch() must be
// safe to call from several threads at once (they are const; keep them free of shared mutation).
#pragma once

#include <tandem/core/tensor.h>
#include <cstdint>
#include <vector>

namespace tandem::data {

/// One example: an input and its target (y may be undefined for unlabelled data).
struct Example {
  Tensor x;
  Tensor y;
};

/// A batch: x [B, ...] and y [B, ...], each contiguous. `auto& [x, y] = batch` works.
struct Batch {
  Tensor x;
  Tensor y;
};

class Dataset {
 public:
  virtual ~Dataset();
  /// Number of examples.
  virtual int64_t size() const = 0;
  /// Example `index` in [0, size()); IndexError naming the index and the size otherwise.
  virtual Example get(int64_t index) const = 0;
  /// The examples at `indices` stacked along a new dim 0: x [B, ...x.shape], y [B, ...y.shape]
  /// (a scalar label per example gives y [B]). ShapeError or DTypeError when two examples do
  /// not stack, naming both indices.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

namespace detail {
/// IndexError "<who>: index 70000 is out of range for a dataset of size 60000" unless
/// 0 <= index < size.
void check_index(const char* who, int64_t index, int64_t size);
}  // namespace detail

}  // namespace tandem::data
