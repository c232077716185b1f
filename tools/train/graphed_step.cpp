// tools/train/graphed_step.cpp — warm up, capture once, copy and replay.
#include <tandem/core/check.h>

#include "graphed_step.h"
#if TANDEM_HAS_CUDA
#include <tandem/core/cuda/graph.h>
#endif

namespace tandem::tools {

GraphedStep::GraphedStep(Device device, Step step) : device_(device), step_(std::move(step)) {
  TD_CHECK_VALUE(device.is_cuda(),
                 "train: --cuda-graphs needs a CUDA device (--device cuda:N), "
                 "not ",
                 device);
#if !TANDEM_HAS_CUDA
  ::tandem::detail::fail<DeviceError>("train: --cuda-graphs: this build has no CUDA backend");
#endif
}

GraphedStep::~GraphedStep() = default;

std::pair<Tensor, Tensor> GraphedStep::operator()(const Tensor& x, const Tensor& y) {
#if TANDEM_HAS_CUDA
  if (!graph_) graph_ = std::make_shared<cuda::Graph>(device_.index());
  const bool other_shape =
      graph_->captured() && (x.shape() != x_.shape() || y.shape() != y_.shape());
  if (eager_ < kEagerSteps || other_shape) {
    // On the graph's stream: the warm-up prepares it (cuda::Graph::run says why). After an eager
    // step the parameters' .grad are that step's tensors; the replays keep using their own.
    ++eager_;
    std::pair<Tensor, Tensor> result;
    graph_->run([&] { result = step_(x, y); });
    return result;
  }
  if (!graph_->captured()) {
    x_ = x.to(device_).clone();
    y_ = y.to(device_).clone();
    graph_->capture([&] { std::tie(loss_, output_) = step_(x_, y_); });
  } else {
    x_.copy_(x);
    y_.copy_(y);
  }
  graph_->replay();
  ++replays_;
  return {loss_, output_};
#else
  return step_(x, y);
#endif
}

}  // namespace tandem::tools
