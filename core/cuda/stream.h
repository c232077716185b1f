// core/cuda/stream.h — streams and events. Kernels run on the calling thread's current stream for
// their device (the legacy default stream unless a StreamGuard says otherwise), so work can be put
// on a side stream and ordered with events, as DDP's NCCL communicator does.
//   cuda::Stream side(0);                    // a new non-blocking stream on cuda:0
//   { cuda::StreamGuard g(side); ... }       // kernels inside run on `side`
//   cuda::Event done; done.record(side); done.wait(cuda::current_stream(0));
#pragma once

#include <cuda_runtime.h>
#include <utility>
#include <vector>

namespace tandem {
class Tensor;
}

namespace tandem::cuda {

/// The stream kernels launched from this thread on cuda:device go to.
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);
/// Every (device, stream) this thread has set, so that another thread can adopt them
/// (ThreadLocalState).
std::vector<std::pair<int, cudaStream_t>> current_streams();

/// An owned stream on one device (non-blocking with respect to the legacy default stream).
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

/// Makes `stream` the current stream of its device for the scope.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

/// A point in a stream's work: record it on one stream, wait for it on another or on the host.
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  /// Later work on `stream` waits until the recorded point has been reached (no host blocking).
  void wait(cudaStream_t stream) const;
  void synchronize() const;
  bool query() const;
  /// Milliseconds between two recorded timing events.
  float elapsed_ms(const Event& end) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

/// Says that work queued on `stream` uses `t`'s memory, which was allocated on another stream:
/// when the last tensor on that memory is freed, the caching allocator hands the block out again
/// only after `stream` has passed the work queued so far (PyTorch's Tensor.record_stream). Without
/// it, a block freed while a side stream still reads it can be reallocated and overwritten by the
/// allocating stream before that read runs. The alternative is to keep `t` alive until the side
/// stream's work is known to be done (what the NCCL communicator does).
void record_stream(const Tensor& t, cudaStream_t stream);
inline void record_stream(const Tensor& t, const Stream& stream) { record_stream(t, stream.get()); }

}  // namespace tandem::cuda
