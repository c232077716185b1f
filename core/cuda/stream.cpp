// core/cuda/stream.cpp — the per-thread current stream (a small per-device table) and the RAII
// stream and event wrappers.
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/deferred_errors.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/tensor.h>
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

void* current_stream_handle(int device) { return current_stream(device); }

StreamHandleGuard::StreamHandleGuard(int device, void* stream) : device_(device) {
  if (!stream) return;
  previous_ = current_stream(device);
  set_current_stream(device, static_cast<cudaStream_t>(stream));
}
StreamHandleGuard::~StreamHandleGuard() {
  if (previous_) set_current_stream(device_, static_cast<cudaStream_t>(previous_));
}

void stream_wait(int device, void* waiter, void* producer) {
  if (waiter == producer || !waiter || !producer) return;
  DeviceGuard guard(device);
  // An event per crossing, destroyed at once: the wait has taken its state when it is queued.
  cudaEvent_t e = nullptr;
  TD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(e, static_cast<cudaStream_t>(producer));
  const cudaError_t waited = recorded == cudaSuccess
                                 ? cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), e, 0)
                                 : recorded;
  cudaEventDestroy(e);
  TD_CUDA_CHECK(waited);
}

StreamFence StreamFence::record() {
  StreamFence f;
  for (const auto& [device, stream] : current_streams()) {
    if (stream == cudaStreamLegacy || stream == nullptr)
      continue;  // ordered with every blocking stream
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    TD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    f.events_.emplace_back(device, e);  // owned from here: freed by f if the record throws
    TD_CUDA_CHECK(cudaEventRecord(e, stream));
  }
  return f;
}
StreamFence::~StreamFence() {
  for (const auto& [device, e] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}
StreamFence::StreamFence(StreamFence&& other) noexcept : events_(std::move(other.events_)) {
  other.events_.clear();
}
StreamFence& StreamFence::operator=(StreamFence&& other) noexcept {
  std::swap(events_, other.events_);
  return *this;
}
void StreamFence::wait() const {
  for (const auto& [device, e] : events_)
    TD_CUDA_CHECK(cudaStreamWaitEvent(current_stream(device), static_cast<cudaEvent_t>(e), 0));
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  TD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
void forget_stream(int device, cudaStream_t s) noexcept;  // core/cuda/allocator.cu
void record_stream(Device device, void* ptr, cudaStream_t s);

void record_stream(const Tensor& t, cudaStream_t stream) {
  TD_CHECK_VALUE(t.defined() && t.device().is_cuda(), "record_stream needs a CUDA tensor, got ",
                 t.defined() ? str(t.device()) : std::string("an undefined tensor"));
  if (t.nbytes() == 0) return;  // no memory, nothing to protect
  // The allocator knows blocks by their start, the storage's, not the view's first element.
  auto* base =
      static_cast<char*>(t.data_ptr()) - t.storage_offset() * int64_t(element_size(t.dtype()));
  record_stream(t.device(), base, stream);
}

Stream::~Stream() {
  if (!stream_) return;
  // Pending work must finish before the stream's cached memory can serve another stream.
  cudaStreamSynchronize(stream_);
  forget_stream(device_, stream_);
  cudaStreamDestroy(stream_);
}
void Stream::synchronize() const {
  TD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  raise_deferred_errors(device_);
}

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
