// data/tensor_dataset.h — a dataset held in tensors, as torch.utils.data.TensorDataset: example i
// is (x[i], y[i]). Batches are gathered row by row with memcpy, so a DataLoader over an in-memory
// dataset costs about one copy of the batch.
#pragma once

#include <tandem/data/dataset.h>

namespace tandem::data {

class TensorDataset : public Dataset {
 public:
  /// x [N, ...] and y [N, ...] (y [N] for one label per example; y may be left undefined for
  /// unlabelled data). ShapeError naming both shapes when their dim 0 differ. The tensors are
  /// kept without autograd history (made contiguous, which copies only when they are not).
  explicit TensorDataset(Tensor x, Tensor y = Tensor());

  int64_t size() const override { return size_; }
  /// (x[index], y[index]) as views of the dataset's tensors: do not modify them in place.
  Example get(int64_t index) const override;
  /// x [B, ...] and y [B, ...], new contiguous tensors on the dataset's device.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& x() const { return x_; }
  const Tensor& y() const { return y_; }

 private:
  Tensor x_, y_;
  int64_t size_ = 0;
};

}  // namespace tandem::data
