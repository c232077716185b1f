// core/cuda_device.h — CUDA device queries. No GPU, no driver, or a driver too old for the runtime
// (cudaErrorInsufficientDriver) all mean zero devices, never a crash; in a build without CUDA
// every query answers as if no GPU were present.
#pragma once

#include <tandem/core/device.h>
#include <cstddef>
#include <string>

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
