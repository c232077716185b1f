// core/kernels/cpu/copy.cpp — copies between layouts and dtypes, fills, arange. copy() is what
// contiguous(), .to(dtype) and every strided write go through, so the same-dtype contiguous case
// is a plain memcpy split across the pool.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cstring>

#include <cmath>

namespace tandem::cpu {

void copy(const Tensor& src, Tensor& dst) {
  TD_CHECK_DEVICE(src.device().is_cpu() && dst.device().is_cpu(),
                  "copy: the CPU backend cannot copy ", src.device(), " -> ", dst.device());
  TD_INTERNAL_ASSERT(src.shape() == dst.shape(), "copy: ", src.shape(), " vs ", dst.shape());
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const auto* s = static_cast<const char*>(src.data_ptr());
    auto* d = static_cast<char*>(dst.data_ptr());
    const int64_t bytes = int64_t(src.nbytes());
    if (s == d) return;
    detail::parallel_for(0, bytes, int64_t(1) << 20, [&](int64_t lo, int64_t hi) {
      std::memcpy(d + lo, s + lo, size_t(hi - lo));
    });
    return;
  }
  dispatch_all(src.dtype(), "copy", [&]<typename S>() {
    dispatch_all(dst.dtype(), "copy", [&]<typename D>() {
      const S* ps = src.data<S>();
      D* pd = dst.data<D>();
      for_each_run<2>(dst.shape(), {&dst.strides(), &src.strides()},
                      [&](const auto& off, int64_t n, const auto& st) {
                        if (st[0] == 1 && st[1] == 1) {  // dense runs (every dtype conversion
                          // of a contiguous tensor, as autocast's casts): a loop the compiler
                          // vectorises (with a run-time overlap check), no strides in the way
                          D* d = pd + off[0];
                          const S* s = ps + off[1];
                          for (int64_t i = 0; i < n; ++i) d[i] = static_cast<D>(s[i]);
                          return;
                        }
                        for (int64_t i = 0; i < n; ++i)
                          pd[off[0] + i * st[0]] = static_cast<D>(ps[off[1] + i * st[1]]);
                      });
    });
  });
}

void fill(Tensor& out, double value) {
  dispatch_all(out.dtype(), "fill", [&]<typename T>() {
    const T v = static_cast<T>(value);
    T* p = out.data<T>();
    for_each_run<1>(out.shape(), {&out.strides()}, [&](const auto& off, int64_t n, const auto& st) {
      if (st[0] == 1) {
        std::fill(p + off[0], p + off[0] + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
      }
    });
  });
}

void arange(Tensor& out, double start, double step) {
  dispatch_numeric(out.dtype(), "arange", [&]<typename T>() {
    T* p = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i)
      p[i] = static_cast<T>(std::fma(double(i), step, start));  // as cuda/random.cu
  });
}

}  // namespace tandem::cpu
