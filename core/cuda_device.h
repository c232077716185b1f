// core/cuda_device.h — CUDA device queries. No GPU, no driver, or a driver too old for the runtime
// (cudaErrorInsufficientDriver) all mean zero devices, never a crash; in a build without CUDA
// every query answers as if no GPU were present.
#pragma once

#include <tandem/core/device.h>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tandem {
class Tensor;
}

namespace tandem::cuda {

/// Number of visible CUDA devices (after CUDA_VISIBLE_DEVICES; 0 without CUDA).
int device_count();
inline bool is_available() { return device_count() > 0; }
/// "NVIDIA H100 80GB HBM3" for cuda:index; DeviceError if there is no such device.
std::string device_name(int index);

struct MemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
/// Free and total memory of cuda:index as the driver sees it (all processes).
MemoryInfo memory_info(int index);

/// Whether cuDNN convolutions keep to deterministic algorithms without FFT or Winograd (the
/// default: runs repeat bit for bit and stay close to the CPU), or take cuDNN's first full-
/// precision heuristic pick, as PyTorch does unless torch.backends.cudnn.deterministic is set:
/// faster at large batches. Float32 never uses TF32 either way.
void set_deterministic_convolutions(bool on);
bool deterministic_convolutions();
/// Whether each convolution shape's algorithm is the fastest of all cuDNN has, timed on its first
/// call's own tensors (PyTorch's torch.backends.cudnn.benchmark), rather than cuDNN's heuristic
/// pick. Off by default: the first call of each shape runs every algorithm and waits for them.
/// The pick still keeps full precision and, while deterministic_convolutions(), determinism.
void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

/// The versions this process runs with, as the libraries say at run time (0: absent): the CUDA
/// runtime and driver (13000 for 13.0), cuBLAS (130100 for 13.1.0; opens it) and cuDNN (91000).
struct LibraryVersions {
  int runtime = 0, driver = 0, cublas = 0, cudnn = 0;
};
LibraryVersions library_versions();

/// The calling thread's current device index (0 when CUDA is absent).
int current_device();
void set_device(int index);
/// Blocks until every kernel and copy queued on cuda:index has finished.
void synchronize(int index);

/// DeviceError unless `device` (a cuda:N) exists: "cuda:3 requested but only 1 CUDA device is
/// visible (CUDA_VISIBLE_DEVICES=1)".
void check_device(Device device);

/// A copy of CPU tensor `t` in page-locked (pinned) host memory, from which copies to a GPU are
/// direct DMA; `t` itself when it is pinned already or no GPU is visible.
Tensor pin_memory(const Tensor& t);
bool is_pinned(const Tensor& t);
/// Freed pinned blocks are cached for the next pin_memory() of the same size and never freed on
/// the way, since cudaFreeHost waits for the whole device; this gives them back (and waits).
void empty_pinned_cache();
size_t pinned_cache_bytes();

/// Within its scope, host-to-GPU copies from pinned memory return before the bytes have moved
/// (Tensor::to(device, non_blocking = true) uses it): the copy is queued on the stream, so later
/// kernels see the data, and the source stays alive until the copy is done. Writing to the source
/// tensor before then races, as with PyTorch's non_blocking=True.
class NonBlockingCopies {
 public:
  NonBlockingCopies();
  ~NonBlockingCopies();
  NonBlockingCopies(const NonBlockingCopies&) = delete;
  NonBlockingCopies& operator=(const NonBlockingCopies&) = delete;

 private:
  bool previous_;
};
bool non_blocking_copies();
void set_non_blocking_copies(bool on);  // ThreadLocalState carries the flag into threads

/// The calling thread's current stream on cuda:device as an opaque handle (the default stream
/// unless a StreamGuard chose another; nullptr without CUDA). Autograd records it with each CUDA
/// node, so that backward runs the node on the stream its forward ran on, as PyTorch does.
void* current_stream_handle(int device);
/// Makes `stream` (a handle from current_stream_handle) the current stream of cuda:device for the
/// scope; nothing for a null handle.
class StreamHandleGuard {
 public:
  StreamHandleGuard(int device, void* stream);
  ~StreamHandleGuard();
  StreamHandleGuard(const StreamHandleGuard&) = delete;
  StreamHandleGuard& operator=(const StreamHandleGuard&) = delete;

 private:
  int device_;
  void* previous_ = nullptr;
};
/// Work queued later on `waiter` waits for the work queued so far on `producer` (both handles on
/// cuda:device), without blocking the host; nothing when they are the same stream.
void stream_wait(int device, void* waiter, void* producer);

/// A point in the calling thread's GPU work: an event on each stream this thread has made current
/// with a StreamGuard. wait() on another thread makes that thread's current streams wait for the
/// point, without blocking the host. A worker thread that copies a caller's CUDA tensors (the
/// collectives that stage them through the host) waits for it first: the worker's default stream
/// is not ordered after a caller's non-blocking side stream, so it could read the tensor before
/// the kernels that produce it have run. Empty (and free) when the caller is on the default
/// streams, which order themselves, and without CUDA.
class StreamFence {
 public:
  StreamFence() = default;  // no point: wait() does nothing
  /// The calling thread's point now.
  static StreamFence record();
  ~StreamFence();
  StreamFence(StreamFence&& other) noexcept;
  StreamFence& operator=(StreamFence&& other) noexcept;
  void wait() const;

 private:
  std::vector<std::pair<int, void*>> events_;  // (device, cudaEvent_t)
};

/// What Tandem does when it makes the host wait for a GPU without being asked to: a copy to the
/// host (item(), to_vector, Tensor::to), a copy from pageable host memory, an index check that
/// had to wait. Nothing, a warning on stderr, or a CudaError naming the call, as PyTorch's
/// torch.cuda.set_sync_debug_mode: a training step should have none, and this finds them.
/// Explicit waits (synchronize(), Stream::synchronize, Event::synchronize) are never reported.
enum class SyncDebugMode { Off, Warn, Error };
void set_sync_debug_mode(SyncDebugMode mode);
SyncDebugMode sync_debug_mode();
/// Implicit host syncs so far in this process, counted in every mode.
int64_t host_syncs();
/// Called by Tandem just before each implicit host sync; throws CudaError under Error.
void note_host_sync(const char* what);

/// Whether a CUDA graph (cuda::Graph, core/cuda/graph.h) is capturing work on cuda:device now.
/// What cannot be captured asks this to fail clearly instead: random draws (their numbers would
/// be the same at every replay), index checks read later by the host. False without CUDA.
bool is_capturing(int device);
namespace detail {
/// core/cuda/graph.cpp: the calling thread begins or ends capturing on `device`.
void note_capture(int device, bool begins);
/// Whether the calling thread's current stream on cuda:device is being captured.
bool current_stream_is_capturing(int device);
}  // namespace detail

/// Index checks that kernels on cuda:device registered and the host has not read yet; they are
/// read, and a bad index raised, at the next sync (core/cuda/deferred_errors.h). 0 without CUDA.
size_t deferred_checks(int device);

/// Makes cuda:index current for the scope and restores the previous device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(Device device) : DeviceGuard(device.is_cuda() ? device.index() : -1) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: nothing to restore
};

}  // namespace tandem::cuda
