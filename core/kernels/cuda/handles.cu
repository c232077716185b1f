// core/kernels/cuda/handles.cu — lazily created cuBLAS and cuDNN handles, one per host thread,
// device and stream. Creating a handle is slow (milliseconds) and binds it to the device current
// at that moment, so handles are kept. One handle is never moved from stream to stream: cuBLAS
// gives each handle a workspace, and a handle re-pointed at stream B while its GEMMs on stream A
// are still running would hand B's GEMMs the workspace A's are using (PyTorch keys its cuBLAS
// workspaces by handle and stream for the same reason).
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <map>
#include <utility>

namespace tandem::cuda {
namespace {

// One thread's handles, destroyed when the thread exits (statuses ignored: a destructor must not
// throw, and at process exit the context may already be going away).
using Key = std::pair<int, cudaStream_t>;  // (device, stream)

struct CublasHandles {
  std::map<Key, cublasHandle_t> by_stream;
  ~CublasHandles() {
    for (auto& [key, h] : by_stream) cublas().Destroy(h);
  }
};

struct CudnnHandles {
  std::map<Key, cudnnHandle_t> by_stream;
  ~CudnnHandles() {
    for (auto& [key, h] : by_stream) cudnnDestroy(h);
  }
};

}  // namespace

// A stream that is destroyed and whose handle value CUDA hands out again finds the old stream's
// cuBLAS/cuDNN handle: harmless, since Stream's destructor waited for that stream's work.
cublasHandle_t cublas_handle(int device) {
  thread_local CublasHandles handles;
  const Key key{device, current_stream(device)};
  auto it = handles.by_stream.find(key);
  if (it == handles.by_stream.end()) {
    DeviceGuard guard(device);  // the handle belongs to the device current at creation
    cublasHandle_t h = nullptr;
    TD_CUBLAS_CHECK(cublas().Create(&h));
    it = handles.by_stream.emplace(key, h).first;
    // Default math never rounds float inputs to TF32, so float GEMMs match the CPU's.
    TD_CUBLAS_CHECK(cublas().SetMathMode(h, CUBLAS_DEFAULT_MATH));
    TD_CUBLAS_CHECK(cublas().SetStream(h, key.second));
  }
  return it->second;
}

cudnnHandle_t cudnn_handle(int device) {
  thread_local CudnnHandles handles;
  const Key key{device, current_stream(device)};
  auto it = handles.by_stream.find(key);
  if (it == handles.by_stream.end()) {
    DeviceGuard guard(device);
    cudnnHandle_t h = nullptr;
    TD_CUDNN_CHECK(cudnnCreate(&h));
    it = handles.by_stream.emplace(key, h).first;
    TD_CUDNN_CHECK(cudnnSetStream(h, key.second));
  }
  return it->second;
}

}  // namespace tandem::cuda
