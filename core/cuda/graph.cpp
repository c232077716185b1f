// core/cuda/graph.cpp — capture with cudaStreamBeginCapture on a stream of the graph's own, the
// allocator's private pool around it, and replay with cudaGraphLaunch between two events. The
// capture mode is thread-local: another thread's unrelated CUDA calls do not break it, while the
// capturing thread's unsafe calls (a synchronous copy, a sync) do, and are reported as such.
#include <tandem/core/check.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/graph.h>
#include <tandem/core/cuda/graph_pool.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <tandem/core/memory_stats.h>

namespace tandem::cuda {

bool detail::current_stream_is_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(device), &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusActive;
}

Graph::Graph(int device) : device_(device) {
  DeviceGuard guard(device);  // checks the device exists, before anything is made on it
  stream_ = std::make_unique<Stream>(device);
  before_ = std::make_unique<Event>();
  after_ = std::make_unique<Event>();
}

Graph::~Graph() {
  if (stream_) reset();
}

void Graph::reset() {
  DeviceGuard guard(device_);
  if (exec_ != nullptr) {
    cudaStreamSynchronize(stream_->get());  // a replay still running uses the pool
    cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  if (graph_ != nullptr) {
    cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
  if (pool_ != 0) {
    detail::release_graph_pool(device_, pool_);
    pool_ = 0;
  }
}

void Graph::run(const std::function<void()>& work) {
  DeviceGuard guard(device_);
  const cudaStream_t caller = current_stream(device_);
  before_->record(caller);
  before_->wait(stream_->get());
  {
    StreamGuard on_graph_stream(*stream_);
    work();
  }
  after_->record(stream_->get());
  after_->wait(caller);
}

void Graph::capture(const std::function<void()>& work) {
  TD_CHECK_VALUE(exec_ == nullptr,
                 "cuda::Graph: capture() on a graph that holds a capture already; reset() first");
  DeviceGuard guard(device_);
  const cudaStream_t s = stream_->get();
  before_->record(current_stream(device_));  // the capture sees what the caller queued so far
  before_->wait(s);
  // The capture allocates only from its own pool (fresh blocks): give the shared cache back to
  // the device first, since a capture cannot empty it when memory runs short.
  ::tandem::empty_cache(Device::cuda(device_));
  pool_ = detail::new_graph_pool();
  detail::begin_capture_allocations(device_, s, pool_);
  detail::note_capture(device_, true);
  cudaGraph_t graph = nullptr;
  try {
    StreamGuard on_graph_stream(*stream_);
    // This thread's cuBLAS and cuDNN handles for the graph's stream, made now: creating one
    // allocates and queries the device, which a capture cannot hold.
    (void)cublas_handle(device_);
    (void)cudnn_handle(device_);
    TD_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      cudaStreamEndCapture(s, &graph);  // ends the (possibly invalidated) capture either way
      (void)cudaGetLastError();
      throw;
    }
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (end != cudaSuccess) {
      (void)cudaGetLastError();
      ::tandem::detail::fail<CudaError>(
          "cuda::Graph: the capture on cuda:", device_, " failed: ", cudaGetErrorString(end),
          "\n  hint: the captured work made a call a capture cannot hold (another stream not "
          "joined back, a synchronous copy, an event query)");
    }
  } catch (...) {
    detail::note_capture(device_, false);
    detail::end_capture_allocations(device_, s);
    if (graph != nullptr) cudaGraphDestroy(graph);
    detail::release_graph_pool(device_, pool_);
    pool_ = 0;
    throw;
  }
  detail::note_capture(device_, false);
  detail::end_capture_allocations(device_, s);
  graph_ = graph;
  const cudaError_t inst = cudaGraphInstantiate(&exec_, graph_, 0);
  if (inst != cudaSuccess) {
    (void)cudaGetLastError();
    exec_ = nullptr;
    reset();
    ::tandem::detail::fail<CudaError>("cuda::Graph: cannot instantiate the captured graph: ",
                                      cudaGetErrorString(inst));
  }
}

void Graph::replay() {
  TD_CHECK_AS(CudaError, exec_ != nullptr, "cuda::Graph: replay() before a successful capture()");
  // Ordered as run() orders work: after what the caller queued (the inputs copied in), before
  // what it queues next (reading the step's results).
  run([&] { TD_CUDA_CHECK(cudaGraphLaunch(exec_, stream_->get())); });
}

}  // namespace tandem::cuda
