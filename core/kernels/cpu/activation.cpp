// core/kernels/cpu/activation.cpp — backward kernels of the activations (their forwards are unary
// ops in elementwise.cpp). All operands contiguous; split across the pool in chunks.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

// out[i] = f(a[i], dy[i]) on contiguous tensors, in parallel chunks.
template <typename T, typename F>
void chunked(const Tensor& a, const Tensor& dy, Tensor& dx, F f) {
  const T* pa = a.data<T>();
  const T* pd = dy.data<T>();
  T* po = dx.data<T>();
  detail::parallel_for(0, dx.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    ArrayMap<T>(po + lo, n) = f(ConstArrayMap<T>(pa + lo, n), ConstArrayMap<T>(pd + lo, n));
  });
}

}  // namespace

// relu: dx = dy · [x > 0]
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), "relu_backward", [&]<typename T>() {
    chunked<T>(x, dy, dx, [](const auto& v, const auto& g) { return (v > T(0)).select(g, T(0)); });
  });
}

// sigmoid: dx = dy · y(1 − y), from the saved output y
void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "sigmoid_backward", [&]<typename T>() {
    chunked<T>(y, dy, dx, [](const auto& v, const auto& g) { return g * v * (T(1) - v); });
  });
}

// tanh: dx = dy · (1 − y²), from the saved output y
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "tanh_backward", [&]<typename T>() {
    chunked<T>(y, dy, dx, [](const auto& v, const auto& g) { return g * (T(1) - v * v); });
  });
}

// gelu (exact): dx = dy · (Φ(x) + x·φ(x)),  Φ(x) = (1 + erf(x/√2))/2,  φ(x) = e^(−x²/2)/√(2π)
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch_float(x.dtype(), "gelu_backward", [&]<typename T>() {
    chunked<T>(x, dy, dx, [](const auto& v, const auto& g) {
      const T inv_sqrt_2pi = T(0.3989422804014327);
      return g * (T(0.5) * (T(1) + (v * T(M_SQRT1_2)).erf()) +
                  v * inv_sqrt_2pi * (T(-0.5) * v * v).exp());
    });
  });
}

}  // namespace tandem::cpu
