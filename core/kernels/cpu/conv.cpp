// core/kernels/cpu/conv.cpp — 2-D convolution on the CPU: im2col + GEMM one sample at a time, the
// batch split over the pool. For one sample, W·cols is [Co, Ho·Wo]: already y[n] in NCHW, so
// nothing is transposed, and the sample's workspace (cols, K × Ho·Wo) stays in cache from im2col
// through the GEMM (and, backward, through col2im). Backward per sample: dW += dY_n·cols_nᵀ,
// dcols = Wᵀ·dY_n folded back into dx[n] by col2im; db += Σ dY_n.
// Each task sums dW and db over its own samples and the partial sums are added in task order, so
// results do not depend on thread timing. A batch smaller than the pool (one large image) runs its
// samples on the caller, where the GEMMs themselves split over the pool instead.
// This is the reference path (and float64's); layers that oneDNN's direct kernels run faster
// (conv_onednn.cpp says which) go there first.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/gemm_util.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/widen.h>
#include <cstring>

namespace tandem::cpu {
namespace {

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t co, kh, kw;  // weight
  int64_t ho, wo;      // output
  int64_t cg, cog, k;  // channels per group (in, out); k = cg·kH·kW (GEMM depth)
  int64_t plane() const { return ho * wo; }
};

Geometry geometry(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  Geometry g;
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.co = w.size(0), g.kh = w.size(2), g.kw = w.size(3);
  g.ho = (g.h + 2 * p.pad_h - p.dilation_h * (g.kh - 1) - 1) / p.stride_h + 1;
  g.wo = (g.w + 2 * p.pad_w - p.dilation_w * (g.kw - 1) - 1) / p.stride_w + 1;
  g.cg = g.c / p.groups, g.cog = g.co / p.groups, g.k = g.cg * g.kh * g.kw;
  return g;
}

// The output columns ox whose input column ix = ox·s − p + j·d falls inside [0, w): [lo, hi).
// Computing the range once per kernel column keeps the inner loops free of bounds checks.
inline std::pair<int64_t, int64_t> valid_cols(int64_t j, const Geometry& g, const Conv2dParams& p) {
  const int64_t shift = j * p.dilation_w - p.pad_w;  // ix = ox·s + shift
  int64_t lo = shift >= 0 ? 0 : (-shift + p.stride_w - 1) / p.stride_w;
  int64_t hi = g.w - 1 - shift < 0 ? 0 : (g.w - 1 - shift) / p.stride_w + 1;
  return {std::min(lo, g.wo), std::max(std::min(hi, g.wo), std::min(lo, g.wo))};
}

// dst[0, n) = src[0, n) for the short runs of im2col (a row of a small output plane, often under
// 16 elements). Through std::copy every run was a call to memmove, and those calls made im2col a
// quarter of a convolution's time; whole 32-byte moves, the last one overlapping, are ~4× faster.
template <typename T>
inline void copy_run(const T* __restrict src, T* __restrict dst, int64_t n) {
  constexpr int64_t kV = 32 / sizeof(T);
  if (n < kV) {
    for (int64_t t = 0; t < n; ++t) dst[t] = src[t];
    return;
  }
  int64_t t = 0;
  for (; t + kV <= n; t += kV) std::memcpy(dst + t, src + t, 32);
  if (t < n) std::memcpy(dst + n - kV, src + n - kV, 32);
}

// The output rows oy whose input row iy = oy·s − p + i·d falls inside [0, h): [lo, hi).
inline std::pair<int64_t, int64_t> valid_rows(int64_t i, const Geometry& g, const Conv2dParams& p) {
  const int64_t shift = i * p.dilation_h - p.pad_h;  // iy = oy·s + shift
  const int64_t lo = std::min(g.ho, shift >= 0 ? 0 : (-shift + p.stride_h - 1) / p.stride_h);
  const int64_t hi = g.h - 1 - shift < 0 ? 0 : (g.h - 1 - shift) / p.stride_h + 1;
  return {lo, std::max(lo, std::min(hi, g.ho))};
}

// Offset in x of the input read by output (oy, 0) through tap (c, i, j): ox adds ox·stride_w.
inline int64_t tap_origin(int64_t c, int64_t i, int64_t j, int64_t oy, const Geometry& g,
                          const Conv2dParams& p) {
  return c * g.h * g.w + (oy * p.stride_h + i * p.dilation_h - p.pad_h) * g.w + j * p.dilation_w -
         p.pad_w;
}

// One sample, one group: cols[(c, i, j), (oy, ox)] = x[c, oy·s − p + i·d, ox·s − p + j·d], 0
// outside. `x` points at the group's first channel of the sample. The loop bounds are computed
// per kernel row and column, so the inner loops only copy; and everything the loops read is a
// local: copy_run's memcpy may alias anything, and would otherwise make the compiler reload the
// geometry for every row (those reloads and a memset call per row made im2col 3× slower).
template <typename T>
void im2col(const T* x, T* cols, const Geometry& g, const Conv2dParams& p) {
  const int64_t w = g.w, wo = g.wo, plane = g.plane(), sw = p.stride_w;
  const int64_t row_step = p.stride_h * w;  // input elements between consecutive output rows
  T* dst = cols;
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      const auto [y0, y1] = valid_rows(i, g, p);
      for (int64_t j = 0; j < g.kw; ++j, dst += plane) {
        const auto [x0, x1] = valid_cols(j, g, p);
        std::fill(dst, dst + y0 * wo, T(0));
        std::fill(dst + y1 * wo, dst + plane, T(0));
        const T* in = x + tap_origin(c, i, j, y0, g, p);
        T* row = dst + y0 * wo;
        if (x0 == 0 && x1 == wo && sw == 1) {  // the common case: one plain copy per row
          for (int64_t oy = y0; oy < y1; ++oy, in += row_step, row += wo) copy_run(in, row, wo);
          continue;
        }
        for (int64_t oy = y0; oy < y1; ++oy, in += row_step, row += wo) {
          if (x0 > 0) std::fill(row, row + x0, T(0));
          if (sw == 1) {
            copy_run(in + x0, row + x0, x1 - x0);
          } else {
            for (int64_t ox = x0; ox < x1; ++ox) row[ox] = in[ox * sw];
          }
          if (x1 < wo) std::fill(row + x1, row + wo, T(0));
        }
      }
    }
  }
}

// The adjoint of im2col for one sample and group: dx[c, ...] = Σ of the cols entries that read it.
template <typename T>
void col2im(const T* cols, T* dx, const Geometry& g, const Conv2dParams& p) {
  std::fill(dx, dx + g.cg * g.h * g.w, T(0));
  const int64_t w = g.w, wo = g.wo, plane = g.plane(), sw = p.stride_w;
  const int64_t row_step = p.stride_h * w;
  const T* src = cols;
  for (int64_t c = 0; c < g.cg; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      const auto [y0, y1] = valid_rows(i, g, p);
      for (int64_t j = 0; j < g.kw; ++j, src += plane) {
        const auto [x0, x1] = valid_cols(j, g, p);
        T* out = dx + tap_origin(c, i, j, y0, g, p);
        const T* in = src + y0 * wo;
        for (int64_t oy = y0; oy < y1; ++oy, out += row_step, in += wo) {
          T* __restrict o = out;
          const T* __restrict v = in;
          if (sw == 1) {
            for (int64_t t = x0; t < x1; ++t) o[t] += v[t];  // vectorised
          } else {
            for (int64_t t = x0; t < x1; ++t) o[t * sw] += v[t];
          }
        }
      }
    }
  }
}

// Runs body(task, lo, hi) over `tasks` fixed slices of the batch, in parallel. The slices do not
// depend on timing, so per-task partial sums (dW, db) are reproducible.
template <typename F>
void over_batch(int64_t n, int64_t tasks, F body) {
  detail::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) body(t, n * t / tasks, n * (t + 1) / tasks);
  });
}

// Tasks per call: a few per thread, so that a thread slowed by the machine (another process, a
// descheduled vCPU) hands its remaining samples to the others instead of holding up the call;
// backward also caps the partial dW sums it keeps at ~16 MB of floats.
int64_t batch_tasks(const Geometry& g, int64_t partial_elems = 0) {
  const int64_t threads = get_num_threads();
  int64_t tasks = std::min<int64_t>(g.n, 4 * threads);
  if (partial_elems > 0)
    tasks = std::min(tasks, std::max<int64_t>(threads, (int64_t(1) << 22) / partial_elems));
  return std::max<int64_t>(tasks, 1);
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p) {
  if (conv2d_forward_onednn(x, w, b, y, p)) return;  // where its kernels win: conv_onednn.cpp
  if (detail::computes_wider(x)) return widened<conv2d_forward>(x, w, b, y, p);
  const Geometry g = geometry(x, w, p);
  dispatch_float(x.dtype(), "conv2d", [&]<typename T>() {
    const int64_t P = g.plane();
    over_batch(g.n, batch_tasks(g), [&](int64_t, int64_t lo, int64_t hi) {
      // Workspaces are tensors: 64-byte aligned (Eigen's reductions peel unaligned heads, so an
      // address-dependent alignment would make results vary run to run) and counted in memory
      // stats.
      Tensor cols_t = empty({g.k, P}, x.options());
      T* cols = cols_t.data<T>();
      for (int64_t n = lo; n < hi; ++n)
        for (int64_t grp = 0; grp < p.groups; ++grp) {
          im2col(x.data<T>() + (n * g.c + grp * g.cg) * g.h * g.w, cols, g, p);
          MatrixMap<T> Y(y.data<T>() + (n * g.co + grp * g.cog) * P, g.cog, P);
          if (b.defined()) {  // start from the bias, then accumulate: no zeroing pass
            Y.colwise() = ConstMatrixMap<T>(b.data<T>() + grp * g.cog, g.cog, 1).col(0);
          } else {
            Y.setZero();
          }
          const ConstMatrixMap<T> W(w.data<T>() + grp * g.cog * g.k, g.cog, g.k);
          parallel_gemm(W, ConstMatrixMap<T>(cols, g.k, P), Y, /*accumulate=*/true);
        }
    });
  });
}

void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db, const Conv2dParams& p) {
  if (conv2d_backward_onednn(x, w, dy, dx, dw, db, p)) return;
  if (detail::computes_wider(x)) return widened<conv2d_backward>(x, w, dy, dx, dw, db, p);
  const Geometry g = geometry(x, w, p);
  dispatch_float(x.dtype(), "conv2d_backward", [&]<typename T>() {
    const int64_t P = g.plane(), tasks = batch_tasks(g, dw.defined() ? dw.numel() : 0);
    // Task 0 sums straight into dw/db; the others into partials added below, in task order.
    Tensor dw_part, db_part;
    if (dw.defined()) dw_part = empty({std::max<int64_t>(tasks - 1, 0), dw.numel()}, x.options());
    if (db.defined()) db_part = empty({std::max<int64_t>(tasks - 1, 0), g.co}, x.options());
    over_batch(g.n, tasks, [&](int64_t t, int64_t lo, int64_t hi) {
      T* pdw = !dw.defined() ? nullptr
               : t == 0      ? dw.data<T>()
                             : dw_part.data<T>() + (t - 1) * dw.numel();
      T* pdb = !db.defined() ? nullptr : t == 0 ? db.data<T>() : db_part.data<T>() + (t - 1) * g.co;
      if (pdw) std::fill(pdw, pdw + dw.numel(), T(0));
      if (pdb) std::fill(pdb, pdb + g.co, T(0));
      Tensor cols_t;
      if (dw.defined() || dx.defined()) cols_t = empty({g.k, P}, x.options());
      for (int64_t n = lo; n < hi; ++n) {
        const T* dyn = dy.data<T>() + n * g.co * P;  // dy[n] is [Co, Ho·Wo]
        if (pdb)
          for (int64_t o = 0; o < g.co; ++o) pdb[o] += ConstArrayMap<T>(dyn + o * P, P).sum();
        for (int64_t grp = 0; grp < p.groups; ++grp) {
          const ConstMatrixMap<T> dY(dyn + grp * g.cog * P, g.cog, P);
          const int64_t x_off = (n * g.c + grp * g.cg) * g.h * g.w;
          T* cols = cols_t.defined() ? cols_t.data<T>() : nullptr;
          if (pdw) {  // dW += dY_n·cols_nᵀ
            im2col(x.data<T>() + x_off, cols, g, p);
            MatrixMap<T> dW(pdw + grp * g.cog * g.k, g.cog, g.k);
            parallel_gemm(dY, ConstMatrixMap<T>(cols, g.k, P).transpose(), dW, true);
          }
          if (dx.defined()) {  // dcols = Wᵀ·dY_n, folded back into dx[n]
            const ConstMatrixMap<T> W(w.data<T>() + grp * g.cog * g.k, g.cog, g.k);
            MatrixMap<T> dcols(cols, g.k, P);
            parallel_gemm(W.transpose(), dY, dcols);
            col2im(cols, dx.data<T>() + x_off, g, p);
          }
        }
      }
    });
    for (int64_t t = 1; t < tasks; ++t) {
      if (dw.defined())
        flat<T>(dw) += ConstArrayMap<T>(dw_part.data<T>() + (t - 1) * dw.numel(), dw.numel());
      if (db.defined()) flat<T>(db) += ConstArrayMap<T>(db_part.data<T>() + (t - 1) * g.co, g.co);
    }
  });
}

}  // namespace tandem::cpu
