// core/kernels/cpu/batch_norm.cpp — training-mode batch normalisation in one kernel per pass,
// channels in parallel: each channel's statistics and sums are over its N·S values in a fixed
// order (sample by sample), in double, so the bits do not depend on the threads. Two sweeps for
// the variance (mean first, then Σ(x − mean)²): no cancellation.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <cmath>

namespace tandem::cpu {
namespace {

struct Layout {
  int64_t n, c, s;  // x as [N, C, S]
  int64_t m() const { return n * s; }
  int64_t at(int64_t i, int64_t ch) const { return (i * c + ch) * s; }  // start of a row of S
};

Layout layout(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1);
  return {n, c, n * c > 0 ? x.numel() / (n * c) : 1};
}

// About a million values' work per task: one channel of a big layer, or several small ones.
int64_t channel_grain(const Layout& l) { return std::max<int64_t>(1, (int64_t(1) << 20) / l.m()); }

}  // namespace

void batch_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& running_mean,
                        Tensor& running_var, const BatchNormParams& p, Tensor& y, Tensor& mean,
                        Tensor& invstd) {
  const Layout l = layout(x);
  dispatch_float(x.dtype(), "batch_norm", [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* rm = running_mean.defined() ? running_mean.data<T>() : nullptr;
    T* rv = running_var.defined() ? running_var.data<T>() : nullptr;
    T *py = y.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>();
    const double m = double(l.m());
    detail::parallel_for(0, l.c, channel_grain(l), [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        double sum = 0;
        for (int64_t i = 0; i < l.n; ++i)
          for (int64_t j = 0; j < l.s; ++j) sum += double(px[l.at(i, ch) + j]);
        const double mu = sum / m;
        double sq = 0;
        for (int64_t i = 0; i < l.n; ++i)
          for (int64_t j = 0; j < l.s; ++j) {
            const double d = double(px[l.at(i, ch) + j]) - mu;
            sq += d * d;
          }
        const double var = sq / m, is = 1.0 / std::sqrt(var + p.eps);
        const double scale = is * (pw ? double(pw[ch]) : 1.0), shift = pb ? double(pb[ch]) : 0.0;
        for (int64_t i = 0; i < l.n; ++i)
          for (int64_t j = 0; j < l.s; ++j) {
            const int64_t k = l.at(i, ch) + j;
            py[k] = T((double(px[k]) - mu) * scale + shift);
          }
        pm[ch] = T(mu);
        pi[ch] = T(is);
        if (rm) rm[ch] = T((1 - p.momentum) * double(rm[ch]) + p.momentum * mu);
        if (rv) rv[ch] = T((1 - p.momentum) * double(rv[ch]) + p.momentum * sq / (m - 1));
      }
    });
  });
}

void batch_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& invstd,
                         const Tensor& dy, double /*eps: invstd has it*/, Tensor& dx, Tensor& dw,
                         Tensor& db) {
  const Layout l = layout(x);
  dispatch_float(x.dtype(), "batch_norm_backward", [&]<typename T>() {
    const T *px = x.data<T>(), *pdy = dy.data<T>(), *pm = mean.data<T>(), *pi = invstd.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    T* pdx = dx.data<T>();
    T* pdw = dw.defined() ? dw.data<T>() : nullptr;
    T* pdb = db.defined() ? db.data<T>() : nullptr;
    const double m = double(l.m());
    detail::parallel_for(0, l.c, channel_grain(l), [&](int64_t lo, int64_t hi) {
      for (int64_t ch = lo; ch < hi; ++ch) {
        const double mu = double(pm[ch]), is = double(pi[ch]);
        double sum_dy = 0, sum_dy_xhat = 0;
        for (int64_t i = 0; i < l.n; ++i)
          for (int64_t j = 0; j < l.s; ++j) {
            const int64_t k = l.at(i, ch) + j;
            sum_dy += double(pdy[k]);
            sum_dy_xhat += double(pdy[k]) * (double(px[k]) - mu) * is;
          }
        const double g = (pw ? double(pw[ch]) : 1.0) * is / m;
        for (int64_t i = 0; i < l.n; ++i)
          for (int64_t j = 0; j < l.s; ++j) {
            const int64_t k = l.at(i, ch) + j;
            const double xhat = (double(px[k]) - mu) * is;
            pdx[k] = T(g * (m * double(pdy[k]) - sum_dy - xhat * sum_dy_xhat));
          }
        if (pdw) pdw[ch] = T(sum_dy_xhat);
        if (pdb) pdb[ch] = T(sum_dy);
      }
    });
  });
}

}  // namespace tandem::cpu
