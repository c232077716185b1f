// core/kernels/cpu/activation.cpp — backward kernels of the activations (their forwards are unary
// ops in elementwise.cpp). All operands contiguous; split across the pool in chunks.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/runs.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

// out[i] = f(a[i], dy[i]) on contiguous tensors, in parallel chunks (16-bit ones widened per
// chunk, runs.h).
template <typename T, typename F>
void chunked(const Tensor& a, const Tensor& dy, Tensor& dx, F f) {
  const T* pa = a.data<T>();
  const T* pd = dy.data<T>();
  T* po = dx.data<T>();
  detail::parallel_for(0, dx.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    const int64_t n = hi - lo;
    write_run(po + lo, n, [&](auto& o) {
      operand<0>(pa + lo, 1, n, [&](const auto& v) {
        operand<1>(pd + lo, 1, n, [&](const auto& g) { o = f(v, g); });
      });
    });
  });
}

}  // namespace

// relu: dx = dy · [x > 0]
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch<FloatTypesWith16Bit>(x.dtype(), "relu_backward", [&]<typename T>() {
    using C = compute_t<T>;
    chunked<T>(x, dy, dx, [](const auto& v, const auto& g) { return (v > C(0)).select(g, C(0)); });
  });
}

// sigmoid: dx = dy · y(1 − y), from the saved output y
void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch<FloatTypesWith16Bit>(y.dtype(), "sigmoid_backward", [&]<typename T>() {
    using C = compute_t<T>;
    chunked<T>(y, dy, dx, [](const auto& v, const auto& g) { return g * v * (C(1) - v); });
  });
}

// tanh: dx = dy · (1 − y²), from the saved output y
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch<FloatTypesWith16Bit>(y.dtype(), "tanh_backward", [&]<typename T>() {
    using C = compute_t<T>;
    chunked<T>(y, dy, dx, [](const auto& v, const auto& g) { return g * (C(1) - v * v); });
  });
}

// gelu (exact): dx = dy · (Φ(x) + x·φ(x)),  Φ(x) = (1 + erf(x/√2))/2,  φ(x) = e^(−x²/2)/√(2π)
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch<FloatTypesWith16Bit>(x.dtype(), "gelu_backward", [&]<typename T>() {
    using C = compute_t<T>;
    chunked<T>(x, dy, dx, [](const auto& v, const auto& g) {
      const C inv_sqrt_2pi = C(0.3989422804014327);
      return g * (C(0.5) * (C(1) + (v * C(M_SQRT1_2)).erf()) +
                  v * inv_sqrt_2pi * (C(-0.5) * v * v).exp());
    });
  });
}

// gelu (tanh form): u = √(2/π)·(x + 0.044715·x³), t = tanh(u)
//   dx = dy · (½(1 + t) + ½x(1 − t²)·√(2/π)·(1 + 3·0.044715·x²))
void gelu_tanh_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  dispatch<FloatTypesWith16Bit>(x.dtype(), "gelu_tanh_backward", [&]<typename T>() {
    using C = compute_t<T>;
    chunked<T>(x, dy, dx, [](const auto& v, const auto& g) {
      const C k = C(0.7978845608028654), a = C(0.044715);
      const auto t = (k * (v + a * v * v * v)).tanh();
      return g *
             (C(0.5) * (C(1) + t) + C(0.5) * v * (C(1) - t * t) * k * (C(1) + C(3) * a * v * v));
    });
  });
}

}  // namespace tandem::cpu
