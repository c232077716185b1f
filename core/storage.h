// core/storage.h — a reference-counted buffer on one device. Tensors that are views of each other
// share one Storage, and with it the version counter that autograd uses to notice when a tensor
// saved for backward was modified in place.
#pragma once

#include <tandem/core/device.h>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace tandem {

class Storage {
 public:
  /// Allocates `nbytes` on `device` through the device's allocator.
  Storage(Device device, size_t nbytes);
  /// Wraps memory owned by someone else; `deleter` runs when the last tensor lets go.
  Storage(Device device, void* data, size_t nbytes, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  /// Bumped by every in-place write; autograd compares it with the value saved at record time.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  std::function<void(void*)> deleter_;  // empty: memory came from allocate()
  std::atomic<uint64_t> version_{0};
};

}  // namespace tandem
