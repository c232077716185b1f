// core/cuda/allocator.cu — device memory through cudaMalloc, counted in the per-device memory
// statistics. Issue #4 replaces it with the caching allocator (size-class pools, stream-aware
// reuse); until then every tensor is one cudaMalloc.
#include <cuda_runtime.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/memory_stats.h>

namespace tandem::cuda {

void* allocate(Device device, size_t nbytes) {
  const int count = device_count();
  TD_CHECK_DEVICE(device.index() < count, "cannot allocate on ", device, ": ", count,
                  " CUDA device(s) visible");
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device.index());
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, nbytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    detail::fail<CudaError>("CUDA error: ", cudaGetErrorString(err), " (cudaMalloc of ", nbytes,
                            " bytes on ", device, "; ", free_bytes, " bytes free)");
  }
  detail::record_allocation(device, int64_t(nbytes));
  detail::record_reserved(device, int64_t(nbytes));
  return p;
}

// Nothing is cached yet: every free went straight back to cudaFree.
void empty_cache(Device) noexcept {}

void deallocate(Device device, void* ptr, size_t nbytes) noexcept {
  cudaFree(ptr);
  detail::record_free(device, int64_t(nbytes));
  detail::record_reserved(device, -int64_t(nbytes));
}

}  // namespace tandem::cuda
