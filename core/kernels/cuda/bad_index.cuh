// core/kernels/cuda/bad_index.cuh — how a CUDA kernel reports an index out of range (a class
// target, an embedding id) the way the CPU does: threads that meet one lower a device flag to
// their position (atomicMin: the lowest wins, as the CPU's first). The host reads it at its next
// sync point and throws the CPU's IndexError then (report_later, core/cuda/deferred_errors.h), or
// at once where the answer is needed now (first(), a host sync).
#pragma once

#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/deferred_errors.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/tensor.h>
#include <cstdint>
#include <optional>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <utility>

namespace tandem::cuda {

using IndexFlag = unsigned long long;  // atomicMin has no int64_t overload
inline constexpr IndexFlag kNoBadIndex = ~IndexFlag(0);

/// A device flag holding the lowest position whose index is out of range (all ones: none), kept
/// in a tensor so memory statistics see it. Construct it on the kernel's device, before the kernel.
class BadIndex {
 public:
  explicit BadIndex(Device device) : flag_(empty({1}, {.dtype = kInt64, .device = device})) {
    TD_CUDA_CHECK(cudaMemsetAsync(flag_.data_ptr(), 0xff, sizeof(IndexFlag), stream()));
  }
  IndexFlag* get() const { return static_cast<IndexFlag*>(flag_.data_ptr()); }

  /// The IndexError, worded by `describe`, comes at the host's next sync point; no wait now.
  void report_later(const Tensor& indices, DescribeBadIndex describe) const {
    defer_index_check(flag_, indices, std::move(describe));
  }

  /// Waits for the kernel; the lowest bad position and the index found there, if any.
  std::optional<std::pair<int64_t, int64_t>> first(const Tensor& indices) const {
    note_host_sync("an index check that must wait for its kernel");
    IndexFlag at = kNoBadIndex;
    TD_CUDA_CHECK(cudaMemcpyAsync(&at, get(), sizeof at, cudaMemcpyDeviceToHost, stream()));
    TD_CUDA_CHECK(cudaStreamSynchronize(stream()));
    if (at == kNoBadIndex) return std::nullopt;
    int64_t value = 0;
    TD_CUDA_CHECK(cudaMemcpyAsync(&value, indices.data<int64_t>() + at, sizeof value,
                                  cudaMemcpyDeviceToHost, stream()));
    TD_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return std::pair{int64_t(at), value};
  }

 private:
  Tensor flag_;
};

}  // namespace tandem::cuda
