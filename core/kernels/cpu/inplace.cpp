// core/kernels/cpu/inplace.cpp — the fused in-place updates optimizers are made of (SGD's
// p −= lr·g, Adam's moment updates). All operands contiguous and of self's shape.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

template <typename T, typename F>
void chunks(Tensor& self, F f) {
  T* p = self.data<T>();
  detail::parallel_for(0, self.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    ArrayMap<T> s(p + lo, hi - lo);
    f(s, lo, hi - lo);
  });
}

}  // namespace

// self += α·x
void add_scaled(Tensor& self, const Tensor& x, double alpha) {
  dispatch_numeric(self.dtype(), "add_", [&]<typename T>() {
    const T* px = x.data<T>();
    chunks<T>(self, [&](auto& s, int64_t lo, int64_t n) {
      s += T(alpha) * ConstArrayMap<T>(px + lo, n);
    });
  });
}

// self += v·a·b
void addcmul(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_float(self.dtype(), "addcmul_", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    chunks<T>(self, [&](auto& s, int64_t lo, int64_t n) {
      s += T(value) * ConstArrayMap<T>(pa + lo, n) * ConstArrayMap<T>(pb + lo, n);
    });
  });
}

// self += v·a/b
void addcdiv(Tensor& self, const Tensor& a, const Tensor& b, double value) {
  dispatch_float(self.dtype(), "addcdiv_", [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    chunks<T>(self, [&](auto& s, int64_t lo, int64_t n) {
      s += T(value) * ConstArrayMap<T>(pa + lo, n) / ConstArrayMap<T>(pb + lo, n);
    });
  });
}

}  // namespace tandem::cpu
