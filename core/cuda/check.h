// core/cuda/check.h — checking CUDA, cuBLAS and cuDNN statuses. One generator macro makes all
// three: the failing statement, the library's own error text, the current device and file:line go
// into a CudaError (never an abort), so `TD_CUDA_CHECK(cudaMalloc(&p, n))` fails readably.
// Include only from .cu files or CUDA-only .cpp files.
#pragma once

#include <tandem/core/error.h>

namespace tandem::cuda::detail {
/// The device the calling thread is on, for messages ("cuda:0"); "cuda:?" if unknown.
std::string current_device_name();
[[noreturn]] void throw_status(const char* library, const char* statement, const char* what,
                               long code, const char* file, int line);
}  // namespace tandem::cuda::detail

// Generates a check for one library: `ok` is its success value, `text(status)` its error string.
#define TD_CUDA_LIBRARY_CHECK(library, ok, text, expr)                                         \
  do {                                                                                         \
    const auto td_status_ = (expr);                                                            \
    if (td_status_ != (ok)) [[unlikely]]                                                       \
      ::tandem::cuda::detail::throw_status(library, #expr, text(td_status_),                   \
                                           static_cast<long>(td_status_), __FILE__, __LINE__); \
  } while (0)

#define TD_CUDA_CHECK(expr) TD_CUDA_LIBRARY_CHECK("CUDA", cudaSuccess, cudaGetErrorString, expr)
// (cuBLAS is opened at run time: include kernels/cuda/cublas.h, which says why.)
#define TD_CUBLAS_CHECK(expr)                                                                      \
  TD_CUDA_LIBRARY_CHECK("cuBLAS", CUBLAS_STATUS_SUCCESS, ::tandem::cuda::cublas().GetStatusString, \
                        expr)
#define TD_CUDNN_CHECK(expr) \
  TD_CUDA_LIBRARY_CHECK("cuDNN", CUDNN_STATUS_SUCCESS, cudnnGetErrorString, expr)
/// After a kernel launch: reports a bad launch configuration at the launch site.
#define TD_CUDA_CHECK_LAUNCH() TD_CUDA_CHECK(cudaGetLastError())
