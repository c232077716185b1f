// core/allocator.cpp — the CPU allocator, and the switch to the CUDA one. Sizes are rounded up to
// the alignment because std::aligned_alloc requires it.
#include <tandem/core/allocator.h>
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <cstdlib>

namespace tandem {

#if TANDEM_WITH_CUDA
namespace cuda {
void* allocate(Device device, size_t nbytes);  // core/cuda/allocator.cu
void deallocate(Device device, void* ptr, size_t nbytes) noexcept;
}  // namespace cuda
#endif

void* allocate(Device device, size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) {
#if TANDEM_WITH_CUDA
    return cuda::allocate(device, nbytes);
#else
    detail::fail<DeviceError>(
        "cannot allocate on ", device,
        ": this build of Tandem has no CUDA (configured with TANDEM_WITH_CUDA=OFF)");
#endif
  }
  const size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  TD_CHECK_AS(DeviceError, p != nullptr, "out of memory: could not allocate ", nbytes, " bytes on ",
              device);
  detail::record_allocation(device, int64_t(nbytes));
  detail::record_reserved(device, int64_t(nbytes));
  return p;
}

void deallocate(Device device, void* ptr, size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  if (device.is_cuda()) {
#if TANDEM_WITH_CUDA
    cuda::deallocate(device, ptr, nbytes);
#endif
    return;
  }
  std::free(ptr);
  detail::record_free(device, int64_t(nbytes));
  detail::record_reserved(device, -int64_t(nbytes));
}

}  // namespace tandem
