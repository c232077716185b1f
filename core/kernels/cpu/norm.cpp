// core/kernels/cpu/norm.cpp — layer norm over the last dim of a contiguous [M, K] (llm.c's
// layernorm_forward/backward): forward in one pass per row that saves mean and rstd; backward from
// them, rows in parallel for dx, columns in parallel for dw and db (each column summed over the
// rows in order, so the bits do not depend on the threads).
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cmath>

namespace tandem::cpu {

// mean = Σx/K, var = Σ(x − mean)²/K (two sweeps of the row: no cancellation), rstd = 1/√(var + ε),
// y = (x − mean)·rstd·w + b
void layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y,
                        Tensor& mean, Tensor& rstd) {
  dispatch_float(x.dtype(), "layer_norm", [&]<typename T>() {
    const int64_t k = x.size(-1), m = k ? x.numel() / k : 0;
    const T* px = x.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
    detail::parallel_for(0, m, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           for (int64_t r = lo; r < hi; ++r) {
                             const ConstArrayMap<T> in(px + r * k, k);
                             ArrayMap<T> out(py + r * k, k);
                             const T mu = in.sum() / T(k);
                             const T var = (in - mu).square().sum() / T(k);
                             const T rs = T(1) / std::sqrt(var + T(eps));
                             out = (in - mu) * rs;
                             if (pw) out *= ConstArrayMap<T>(pw, k);
                             if (pb) out += ConstArrayMap<T>(pb, k);
                             pm[r] = mu;
                             pr[r] = rs;
                           }
                         });
  });
}

// x̂ = (x − mean)·rstd, g = dy·w:
//   dx = rstd·(g − mean(g) − x̂·mean(g·x̂))   dw = Σ_rows dy·x̂   db = Σ_rows dy
void layer_norm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  dispatch_float(x.dtype(), "layer_norm_backward", [&]<typename T>() {
    const int64_t k = x.size(-1), m = k ? x.numel() / k : 0;
    const T* px = x.data<T>();
    const T* pg = dy.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T *pm = mean.data<T>(), *pr = rstd.data<T>();
    T* pdx = dx.data<T>();
    detail::parallel_for(0, m, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           Array1<T> g(k);
                           for (int64_t r = lo; r < hi; ++r) {
                             const ConstArrayMap<T> in(px + r * k, k), d(pg + r * k, k);
                             const Array1<T> xhat = (in - pm[r]) * pr[r];
                             g = pw ? Array1<T>(d * ConstArrayMap<T>(pw, k)) : Array1<T>(d);
                             const T g_mean = g.sum() / T(k), gx_mean = (g * xhat).sum() / T(k);
                             ArrayMap<T>(pdx + r * k, k) = pr[r] * (g - g_mean - xhat * gx_mean);
                           }
                         });
    if (!dw.defined() && !db.defined()) return;
    T* pdw = dw.defined() ? dw.data<T>() : nullptr;
    T* pdb = db.defined() ? db.data<T>() : nullptr;
    for_column_blocks(m, k, [&](int64_t c0, int64_t n) {
      Array1<T> sw = Array1<T>::Zero(n), sb = Array1<T>::Zero(n);
      for (int64_t r = 0; r < m; ++r) {
        const ConstArrayMap<T> in(px + r * k + c0, n), d(pg + r * k + c0, n);
        if (pdw) sw += d * ((in - pm[r]) * pr[r]);
        if (pdb) sb += d;
      }
      if (pdw) ArrayMap<T>(pdw + c0, n) = sw;
      if (pdb) ArrayMap<T>(pdb + c0, n) = sb;
    });
  });
}

}  // namespace tandem::cpu
