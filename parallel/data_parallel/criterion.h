// parallel/data_parallel/criterion.h — the loss computed where the outputs are (PyTorch-Encoding's
// DataParallelCriterion, from pytorch#1893). With DataParallel's gather, device 0 holds every
// replica's output and the loss's activations over the whole batch; for a model with a large
// output (a 20,000-class classifier) that is where device 0's extra memory goes. Here each device
// computes the loss of its own output shard against its own target shard, and only the scalar
// losses travel. They are weighted by shard size, so the result is the single-device mean over
// the batch exactly, uneven shards included (for a loss that is a mean over rows).
//
//   auto outputs = dp.forward_shards(x);                     // not gathered
//   Tensor loss = criterion(outputs, y);                     // a scalar on output_device
#pragma once

#include <tandem/core/tensor.h>
#include <functional>
#include <vector>

namespace tandem::parallel {

class DataParallelCriterion {
 public:
  using Loss = std::function<Tensor(const Tensor& output, const Tensor& target)>;
  explicit DataParallelCriterion(Loss loss, Device output_device = Device::cpu(), int64_t dim = 0);

  /// outputs[k] lives on device k (DataParallel::forward_shards); `target` is the whole batch's,
  /// scattered here with the same cuts. Returns Σ_k (n_k / n) · loss(outputs[k], target_k).
  Tensor operator()(const std::vector<Tensor>& outputs, const Tensor& target) const;

 private:
  Loss loss_;
  Device output_device_;
  int64_t dim_;
};

}  // namespace tandem::parallel
