// core/kernels/cuda/activation.cu — backward kernels of the activations on CUDA (their forwards
// are unary ops in elementwise.cu), with the formulas of cpu/activation.cpp. The CPU takes
// contiguous operands only; here a strided or broadcast x/dy also works, through StridedIndex.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/in_float.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

// relu: dx = dy · [x > 0]
struct ReluBackward {
  template <typename T>
  __device__ T operator()(T x, T g) const {
    return x > T(0) ? g : T(0);
  }
};

// sigmoid: dx = dy · y(1 − y), from the saved output y
struct SigmoidBackward {
  template <typename T>
  __device__ T operator()(T y, T g) const {
    return g * y * (T(1) - y);
  }
};

// tanh: dx = dy · (1 − y²), from the saved output y
struct TanhBackward {
  template <typename T>
  __device__ T operator()(T y, T g) const {
    return g * (T(1) - y * y);
  }
};

// gelu (exact): dx = dy · (Φ(x) + x·φ(x)),  Φ(x) = (1 + erf(x/√2))/2,  φ(x) = e^(−x²/2)/√(2π)
struct GeluBackward {
  template <typename T>
  __device__ T operator()(T x, T g) const {
    const T inv_sqrt_2pi = T(0.3989422804014327);
    return g * (T(0.5) * (T(1) + d_erf(x * T(0.70710678118654752440))) +
                x * inv_sqrt_2pi * d_exp(T(-0.5) * x * x));
  }
};

// gelu (tanh form): u = √(2/π)·(x + 0.044715·x³), t = tanh(u)
//   dx = dy · (½(1 + t) + ½x(1 − t²)·√(2/π)·(1 + 3·0.044715·x²))
struct GeluTanhBackward {
  template <typename T>
  __device__ T operator()(T x, T g) const {
    const T k = T(0.7978845608028654), a = T(0.044715);
    const T t = d_tanh(k * (x + a * x * x * x));
    return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * a * x * x));
  }
};

template <typename T, typename F>
__global__ void backward_kernel(const T* a, const T* dy, T* dx, int64_t n, F f) {
  TD_GRID_STRIDE_LOOP(i, n) dx[i] = f(a[i], dy[i]);
}

template <typename T, typename F>
__global__ void backward_strided_kernel(const T* a, StridedIndex ia, const T* dy, StridedIndex id,
                                        T* dx, int64_t n, F f) {
  TD_GRID_STRIDE_LOOP(i, n) dx[i] = f(a[ia.offset(i)], dy[id.offset(i)]);
}

// dx[i] = f(a[i], dy[i]) for a floating dtype, on dx's device; 16-bit operands compute in float
// (in_float.cuh).
template <typename Fn>
void run(const char* op, const Tensor& a, const Tensor& dy, Tensor& dx, Fn fn) {
  TD_INTERNAL_ASSERT(dx.is_contiguous(), op, ": the CUDA kernel needs a contiguous output");
  const InFloat<Fn> f{fn};
  const int64_t n = dx.numel();
  DeviceGuard guard(dx.device());
  dispatch<FloatTypesWith16Bit>(a.dtype(), op, [&]<typename T>() {
    if (n == 0) return;  // after dispatch, so a bad dtype still throws
    const T* pa = a.data<T>();
    const T* pd = dy.data<T>();
    T* po = dx.data<T>();
    if (dense_like(a, dx) && dense_like(dy, dx)) {
      backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(pa, pd, po, n, f);
    } else {
      backward_strided_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
          pa, StridedIndex(a, dx.shape()), pd, StridedIndex(dy, dx.shape()), po, n, f);
    }
    TD_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  run("relu_backward", x, dy, dx, ReluBackward{});
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  run("sigmoid_backward", y, dy, dx, SigmoidBackward{});
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  run("tanh_backward", y, dy, dx, TanhBackward{});
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  run("gelu_backward", x, dy, dx, GeluBackward{});
}

void gelu_tanh_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  run("gelu_tanh_backward", x, dy, dx, GeluTanhBackward{});
}

}  // namespace tandem::cuda
