// core/kernels/cuda/handles.h — the cuBLAS and cuDNN handles of the CUDA kernels: one per device
// and host thread (a handle must not be used by two threads at once), created on first use and
// bound to the thread's current stream for that device on every fetch.
#pragma once

#include <cudnn.h>
#include <tandem/core/kernels/cuda/cublas.h>

namespace tandem::cuda {

/// The calling thread's cuBLAS handle for cuda:device, set to run on its current stream.
cublasHandle_t cublas_handle(int device);
/// The calling thread's cuDNN handle for cuda:device, set to run on its current stream.
cudnnHandle_t cudnn_handle(int device);

}  // namespace tandem::cuda
