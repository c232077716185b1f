// core/cuda/device.cpp — device counting. cudaGetDeviceCount returns cudaErrorInsufficientDriver
// (35) with no driver and cudaErrorNoDevice (100) with no GPU; both mean zero, and the sticky
// error is cleared so later calls do not see it.
#include <tandem/core/cuda_device.h>

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace tandem::cuda {

int device_count() {
#if TANDEM_WITH_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

}  // namespace tandem::cuda
