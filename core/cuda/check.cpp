// core/cuda/check.cpp — the cold path of the TD_CUDA_* checks.
#include <cuda_runtime.h>
#include <tandem/core/cuda/check.h>

namespace tandem::cuda::detail {

std::string current_device_name() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cuda:?";
  }
  return "cuda:" + std::to_string(d);
}

void throw_status(const char* library, const char* statement, const char* what, long code,
                  const char* file, int line) {
  throw CudaError(str(library, " error ", code, " (", what, ") on ", current_device_name(), " in `",
                      statement, "` at ", file, ":", line));
}

}  // namespace tandem::cuda::detail
