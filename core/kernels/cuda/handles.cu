// core/kernels/cuda/handles.cu — lazily created per-thread, per-device cuBLAS and cuDNN handles.
// Creating a handle is slow (milliseconds) and binds it to the device current at that moment, so
// each thread keeps one per device and re-points it at the current stream on every fetch.
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <unordered_map>

namespace tandem::cuda {
namespace {

// One thread's handles, destroyed when the thread exits (statuses ignored: a destructor must not
// throw, and at process exit the context may already be going away).
struct CublasHandles {
  std::unordered_map<int, cublasHandle_t> by_device;
  ~CublasHandles() {
    for (auto& [device, h] : by_device) cublas().Destroy(h);
  }
};

struct CudnnHandles {
  std::unordered_map<int, cudnnHandle_t> by_device;
  ~CudnnHandles() {
    for (auto& [device, h] : by_device) cudnnDestroy(h);
  }
};

}  // namespace

cublasHandle_t cublas_handle(int device) {
  thread_local CublasHandles handles;
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    DeviceGuard guard(device);  // the handle belongs to the device current at creation
    cublasHandle_t h = nullptr;
    TD_CUBLAS_CHECK(cublas().Create(&h));
    it = handles.by_device.emplace(device, h).first;
    // Default math never rounds float inputs to TF32, so float GEMMs match the CPU's.
    TD_CUBLAS_CHECK(cublas().SetMathMode(h, CUBLAS_DEFAULT_MATH));
  }
  TD_CUBLAS_CHECK(cublas().SetStream(it->second, current_stream(device)));
  return it->second;
}

cudnnHandle_t cudnn_handle(int device) {
  thread_local CudnnHandles handles;
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) {
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    TD_CUDNN_CHECK(cudnnCreate(&h));
    it = handles.by_device.emplace(device, h).first;
  }
  TD_CUDNN_CHECK(cudnnSetStream(it->second, current_stream(device)));
  return it->second;
}

}  // namespace tandem::cuda
