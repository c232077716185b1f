// core/kernels/cpu/softmax.cpp — softmax and log_softmax over the last dim of a contiguous
// [M, K], numerically stable (the row maximum is subtracted before exp), parallel over rows.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

// f(x_row, y_row[, dy_row]) for each row of K elements.
template <typename T, typename F>
void rows(const Tensor& x, Tensor& y, F f) {
  const int64_t k = x.dim() ? x.size(-1) : 1;
  const int64_t m = k ? x.numel() / k : 0;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  detail::parallel_for(0, m, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)),
                       [&](int64_t lo, int64_t hi) {
                         for (int64_t r = lo; r < hi; ++r) {
                           ArrayMap<T> out(py + r * k, k);
                           f(r, ConstArrayMap<T>(px + r * k, k), out);
                         }
                       });
}

}  // namespace

// y = e^(x − max x) / Σ e^(x − max x)
void softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), "softmax", [&]<typename T>() {
    rows<T>(x, y, [](int64_t, const auto& in, auto& out) {
      out = (in - in.maxCoeff()).exp();
      out /= out.sum();
    });
  });
}

// dx = y·(dy − Σ dy·y)
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "softmax_backward", [&]<typename T>() {
    const int64_t k = y.size(-1);
    const T* pg = dy.data<T>();
    rows<T>(y, dx, [&](int64_t r, const auto& yr, auto& out) {
      const ConstArrayMap<T> g(pg + r * k, k);
      out = yr * (g - (g * yr).sum());
    });
  });
}

// y = x − max x − log Σ e^(x − max x)
void log_softmax_forward(const Tensor& x, Tensor& y) {
  dispatch_float(x.dtype(), "log_softmax", [&]<typename T>() {
    rows<T>(x, y, [](int64_t, const auto& in, auto& out) {
      const T mx = in.maxCoeff();
      out = in - mx;
      out -= std::log(out.exp().sum());
    });
  });
}

// dx = dy − e^y·Σ dy
void log_softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  dispatch_float(y.dtype(), "log_softmax_backward", [&]<typename T>() {
    const int64_t k = y.size(-1);
    const T* pg = dy.data<T>();
    rows<T>(y, dx, [&](int64_t r, const auto& yr, auto& out) {
      const ConstArrayMap<T> g(pg + r * k, k);
      out = g - yr.exp() * g.sum();
    });
  });
}

}  // namespace tandem::cpu
