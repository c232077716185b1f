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
  const bool other_shape = graph_ && (x.shape() != x_.shape() || y.shape() != y_.shape());
  if (eager_ < kEagerSteps || other_shape) {
    ++eager_;
    return step_(x, y);
  }
  if (!graph_) {
    x_ = x.to(device_).clone();
    y_ = y.to(device_).clone();
    auto graph = std::make_shared<cuda::Graph>(device_.index());
    graph->capture([&] { std::tie(loss_, output_) = step_(x_, y_); });
    graph_ = std::move(graph);
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
