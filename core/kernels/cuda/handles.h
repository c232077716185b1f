// core/kernels/cuda/handles.h — the cuBLAS and cuDNN handles of the CUDA kernels: one per host
// thread (a handle must not be used by two threads at once), device and stream (a handle's
// workspace must not serve two streams at once), created on first use.
#pragma once

#include <cudnn.h>
#include <tandem/core/kernels/cuda/cublas.h>

namespace tandem::cuda {

/// The calling thread's cuBLAS handle for cuda:device and its current stream there.
cublasHandle_t cublas_handle(int device);
/// The calling thread's cuDNN handle for cuda:device and its current stream there.
cudnnHandle_t cudnn_handle(int device);

}  // namespace tandem::cuda
