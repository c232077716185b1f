// core/kernels/cuda/copy.cu — copies to, from and between CUDA devices, and fill. Contiguous
// same-dtype copies are one cudaMemcpy; other layouts are made contiguous on the CPU side first
// (the strided CUDA copy kernel comes with the full backend, issue #4).
#include <cuda_runtime.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/layout.h>

namespace tandem::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  TD_CHECK_AS(CudaError, err == cudaSuccess, "CUDA error: ", cudaGetErrorString(err), " in ", what);
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = value;
}

}  // namespace

void copy(const Tensor& src, Tensor& dst) {
  if (src.dtype() != dst.dtype() || !src.is_contiguous()) {
    // Convert on the host, where the strided CPU kernel runs, then copy the contiguous result.
    TD_CHECK_DEVICE(src.device().is_cpu(), "copy: a strided or converting copy from ", src.device(),
                    " is not on CUDA yet (issue #4)");
    Tensor staged = detail::convert(src, src.device(), dst.dtype());
    return copy(staged, dst);
  }
  TD_CHECK_DEVICE(dst.is_contiguous(), "copy: a strided destination on ", dst.device(),
                  " is not on CUDA yet (issue #4)");
  const cudaMemcpyKind kind = src.device().is_cpu()   ? cudaMemcpyHostToDevice
                              : dst.device().is_cpu() ? cudaMemcpyDeviceToHost
                                                      : cudaMemcpyDeviceToDevice;
  check(cudaMemcpy(dst.data_ptr(), src.data_ptr(), src.nbytes(), kind), "cudaMemcpy");
}

void fill(Tensor& out, double value) {
  TD_CHECK_DEVICE(out.is_contiguous(), "fill: a strided fill on ", out.device(),
                  " is not on CUDA yet (issue #4)");
  dispatch_all(out.dtype(), "fill", [&]<typename T>() {
    const int64_t n = out.numel();
    const int threads = 256;
    const auto blocks = unsigned((n + threads - 1) / threads);
    fill_kernel<T><<<blocks, threads>>>(out.data<T>(), static_cast<T>(value), n);
    check(cudaGetLastError(), "fill_kernel launch");
  });
}

}  // namespace tandem::cuda
