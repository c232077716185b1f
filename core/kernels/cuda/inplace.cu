// core/kernels/cuda/inplace.cu — the fused in-place updates optimizers are made of (SGD's
// p −= lr·g, Adam's moment updates) on CUDA, as cpu/inplace.cpp. `self` is contiguous; the other
// operands are too when they come from an optimizer, but a strided or broadcast view also works.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

// The updates, in the CPU's order of operations. `b` is unused by add_scaled.
template <typename T>
struct AddScaled {
  T alpha;
  __device__ T operator()(T s, T x, T) const { return s + alpha * x; }
};
template <typename T>
struct AddCMul {
  T value;
  __device__ T operator()(T s, T a, T b) const { return s + value * a * b; }
};
template <typename T>
struct AddCDiv {
  T value;
  __device__ T operator()(T s, T a, T b) const { return s + value * a / b; }
};

template <typename T, typename F>
__global__ void update_kernel(T* self, const T* a, const T* b, int64_t n, F f) {
  TD_GRID_STRIDE_LOOP(i, n) self[i] = f(self[i], a[i], b[i]);
}

template <typename T, typename F>
__global__ void update_strided_kernel(T* self, const T* a, StridedIndex ia, const T* b,
                                      StridedIndex ib, int64_t n, F f) {
  TD_GRID_STRIDE_LOOP(i, n) self[i] = f(self[i], a[ia.offset(i)], b[ib.offset(i)]);
}

// self[i] = f(self[i], a[i], b[i]) on self's device.
template <typename T, typename F>
void run(const char* op, Tensor& self, const Tensor& a, const Tensor& b, F f) {
  TD_INTERNAL_ASSERT(self.is_contiguous(), op, ": the CUDA kernel needs a contiguous self");
  const int64_t n = self.numel();
  if (n == 0) return;
  DeviceGuard guard(self.device());
  T* ps = self.data<T>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  if (dense_like(a, self) && dense_like(b, self)) {
    update_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ps, pa, pb, n, f);
  } else {
    update_strided_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
        ps, pa, StridedIndex(a, self.shape()), pb, StridedIndex(b, self.shape()), n, f);
  }
  TD_CUDA_CHECK_LAUNCH();
}

}  // namespace

// self += α·x (α converted to self's dtype first, as on the CPU: truncated for int64)
void add_scaled(Tensor& self, const Tensor& x, double alpha) {
  dispatch_numeric(self.dtype(), "add_",
                   [&]<typename T>() { run<T>("add_", self, x, x, AddScaled<T>{T(alpha)}); });
}

// self += v·a·b
void addcmul(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_float(self.dtype(), "addcmul_",
                 [&]<typename T>() { run<T>("addcmul_", self, a, b, AddCMul<T>{T(value)}); });
}

// self += v·a/b
void addcdiv(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_float(self.dtype(), "addcdiv_",
                 [&]<typename T>() { run<T>("addcdiv_", self, a, b, AddCDiv<T>{T(value)}); });
}

}  // namespace tandem::cuda
