// parallel/data_parallel/criterion.cpp — per-device losses, reduced as scalars.
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/data_parallel/criterion.h>
#include <tandem/parallel/data_parallel/parallel_apply.h>
#include <tandem/parallel/data_parallel/scatter_gather.h>

namespace tandem::parallel {

DataParallelCriterion::DataParallelCriterion(Loss loss, Device output_device, int64_t dim)
    : loss_(std::move(loss)), output_device_(output_device), dim_(dim) {
  TD_CHECK_VALUE(loss_ != nullptr, "DataParallelCriterion: no loss function given");
}

Tensor DataParallelCriterion::operator()(const std::vector<Tensor>& outputs,
                                         const Tensor& target) const {
  TD_CHECK_VALUE(!outputs.empty(), "DataParallelCriterion: no outputs");
  std::vector<Device> devices;
  for (const Tensor& o : outputs) devices.push_back(o.device());
  const std::vector<Tensor> targets = scatter(target, devices, dim_);
  TD_CHECK_SHAPE(targets.size() == outputs.size(), "DataParallelCriterion: the target ",
                 target.shape(), " cuts into ", targets.size(), " pieces along dim ", dim_,
                 " but there are ", outputs.size(), " outputs");
  int64_t total = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    TD_CHECK_SHAPE(outputs[k].size(dim_) == targets[k].size(dim_), "DataParallelCriterion: output ",
                   k, " ", outputs[k].shape(), " does not match its target piece ",
                   targets[k].shape(), " along dim ", dim_);
    total += targets[k].size(dim_);
  }
  std::vector<Tensor> losses(outputs.size());
  parallel_apply(devices, [&](size_t k) { losses[k] = loss_(outputs[k], targets[k]); });
  Tensor sum;
  for (size_t k = 0; k < losses.size(); ++k) {
    // loss = Σ_k w_k · loss_k with w_k = n_k / n        dloss_k = w_k · dloss
    Tensor part = losses[k].to(output_device_) * (double(targets[k].size(dim_)) / double(total));
    sum = sum.defined() ? sum + part : part;
  }
  return sum;
}

}  // namespace tandem::parallel
