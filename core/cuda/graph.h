// core/cuda/graph.h — whole-step CUDA graphs (torch.cuda.CUDAGraph): the kernels a piece of work
// queues are captured once and replayed with one launch, so a step of many small kernels costs
// one launch instead of hundreds, and no host work between them.
//
//   cuda::Graph graph(0);
//   for (int i = 0; i < 3; ++i) graph.run([&] { train_step(static_x, static_y); });  // warm up
//   graph.capture([&] { train_step(static_x, static_y); });        // records, computes nothing
//   for (auto& [x, y] : loader) {
//     static_x.copy_(x), static_y.copy_(y);                        // new inputs, same addresses
//     graph.replay();                                              // the whole step
//   }
//
// What a replay repeats is exactly what was captured: the same addresses (inputs go in by copy_),
// the same host scalars (a learning rate changed after capture is not seen: capture again), the
// same kernels. So a tensor the captured work reads must not be replaced after the capture
// (load_state_dict on the optimizer or the scaler, a new input tensor): the replays would go on
// using the old one's memory, which is no longer reserved. Load first, then capture. Memory the
// captured work allocates comes from the graph's private pool and stays reserved for it
// (core/cuda/allocator.cu), so tensors the step leaves behind (the loss, the gradients) are valid
// after each replay. Warm up before capturing: optimizers create their state and SGD's first step
// differs from the others. What cannot be captured fails with a CudaError naming it, the graph is
// left empty, and the device stays usable: a host sync (item(), a copy to the host), a random draw
// (dropout: its mask would repeat at every replay), an index check that the host reads later (a bad
// index in a replay is not reported).
#pragma once

#include <cuda_runtime.h>
#include <tandem/core/cuda/stream.h>
#include <functional>
#include <memory>

namespace tandem::cuda {

class Graph {
 public:
  explicit Graph(int device = 0);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Runs `work` eagerly on the graph's stream, ordered as replay() is: the warm-up steps before
  /// a capture belong here, so that the cuBLAS and cuDNN handles of every thread the step uses
  /// (the backward worker's too) exist for this stream before the capture, and the blocks the
  /// warm-up leaves are ones the capture may take over.
  void run(const std::function<void()>& work);
  /// Records the kernels `work` queues on cuda:device from this thread (it runs with the graph's
  /// stream current; after everything queued so far on the caller's stream) and instantiates
  /// them. Nothing is computed. ValueError if already captured (reset() first).
  void capture(const std::function<void()>& work);
  /// Runs the captured kernels once, ordered after the caller's current stream and before what
  /// it queues next. CudaError if nothing was captured.
  void replay();
  /// Drops the captured graph and its private pool (tensors made by the capture stay valid).
  void reset();
  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }

 private:
  int device_;
  std::unique_ptr<Stream> stream_;         // where capture and replay run
  std::unique_ptr<Event> before_, after_;  // the caller's stream -> the graph's -> the caller's
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int pool_ = 0;  // the allocator's private pool (0: none yet)
};

}  // namespace tandem::cuda
