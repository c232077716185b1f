// core/cuda/stream.cpp — the per-thread current stream (a small per-device table) and the RAII
// stream and event wrappers.
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <unordered_map>

namespace tandem::cuda {
namespace {
thread_local std::unordered_map<int, cudaStream_t> t_current;
}

cudaStream_t current_stream(int device) {
  const auto it = t_current.find(device);
  return it == t_current.end() ? cudaStreamLegacy : it->second;
}

void set_current_stream(int device, cudaStream_t stream) { t_current[device] = stream; }

std::vector<std::pair<int, cudaStream_t>> current_streams() {
  return {t_current.begin(), t_current.end()};
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  TD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
void forget_stream(int device, cudaStream_t s) noexcept;  // core/cuda/allocator.cu

Stream::~Stream() {
  if (!stream_) return;
  // Pending work must finish before the stream's cached memory can serve another stream.
  cudaStreamSynchronize(stream_);
  forget_stream(device_, stream_);
  cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { TD_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

StreamGuard::StreamGuard(const Stream& stream)
    : device_(stream.device()), previous_(current_stream(stream.device())) {
  set_current_stream(device_, stream.get());
}
StreamGuard::~StreamGuard() { set_current_stream(device_, previous_); }

Event::Event(bool timing) {
  TD_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) { TD_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::wait(cudaStream_t stream) const {
  TD_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}
void Event::synchronize() const { TD_CUDA_CHECK(cudaEventSynchronize(event_)); }
bool Event::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  TD_CUDA_CHECK(e);
  return true;
}
float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  TD_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace tandem::cuda
