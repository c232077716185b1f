// core/kernels/cpu/conv.cpp — 2-D convolution on the CPU by im2col + GEMM. The whole batch is
// unfolded at once into cols [C·kH·kW, N·Ho·Wo], so each group is ONE large GEMM (which OpenBLAS
// threads well) instead of N small ones. Backward: dW = dY'·colsᵀ, dcols = Wᵀ·dY', then col2im
// adds dcols back into dx. im2col/col2im are split over the pool by rows and by (n, c) planes.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/gemm_util.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {
namespace {

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t co, kh, kw;  // weight
  int64_t ho, wo;      // output
  int64_t cg, cog, k;  // channels per group (in, out); k = cg·kH·kW (GEMM depth)
  int64_t cols() const { return n * ho * wo; }
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

// cols[(c, i, j), (n, oy, ox)] = x[n, c0 + c, oy·s − p + i·d, ox·s − p + j·d] (0 outside).
template <typename T>
void im2col(const T* x, T* cols, const Geometry& g, const Conv2dParams& p, int64_t c0) {
  const int64_t plane = g.ho * g.wo;
  detail::parallel_for(0, g.k, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t c = r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      const auto [x0, x1] = valid_cols(j, g, p);
      const int64_t shift = j * p.dilation_w - p.pad_w;
      for (int64_t n = 0; n < g.n; ++n) {
        const T* src = x + ((n * g.c) + c0 + c) * g.h * g.w;
        T* dst = cols + r * g.cols() + n * plane;
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * p.stride_h - p.pad_h + i * p.dilation_h;
          T* row = dst + oy * g.wo;
          if (iy < 0 || iy >= g.h) {
            std::fill(row, row + g.wo, T(0));
            continue;
          }
          const T* in = src + iy * g.w + shift;
          std::fill(row, row + x0, T(0));
          if (p.stride_w == 1) {
            std::copy(in + x0, in + x1, row + x0);
          } else {
            for (int64_t ox = x0; ox < x1; ++ox) row[ox] = in[ox * p.stride_w];
          }
          std::fill(row + x1, row + g.wo, T(0));
        }
      }
    }
  });
}

// dx[n, c0 + c, ...] += cols[(c, i, j), (n, oy, ox)]: the adjoint of im2col. Each (n, c) plane is
// written by one task, so there are no races.
template <typename T>
void col2im(const T* cols, T* dx, const Geometry& g, const Conv2dParams& p, int64_t c0) {
  const int64_t plane = g.ho * g.wo;
  detail::parallel_for(0, g.n * g.cg, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t n = t / g.cg, c = t % g.cg;
      T* dst = dx + ((n * g.c) + c0 + c) * g.h * g.w;
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const T* src = cols + ((c * g.kh + i) * g.kw + j) * g.cols() + n * plane;
          const auto [x0, x1] = valid_cols(j, g, p);
          const int64_t shift = j * p.dilation_w - p.pad_w;
          for (int64_t oy = 0; oy < g.ho; ++oy) {
            const int64_t iy = oy * p.stride_h - p.pad_h + i * p.dilation_h;
            if (iy < 0 || iy >= g.h) continue;
            T* out = dst + iy * g.w + shift;
            const T* in = src + oy * g.wo;
            if (p.stride_w == 1) {
              for (int64_t ox = x0; ox < x1; ++ox) out[ox] += in[ox];  // vectorised
            } else {
              for (int64_t ox = x0; ox < x1; ++ox) out[ox * p.stride_w] += in[ox];
            }
          }
        }
    }
  });
}

// [N, Co, P] <-> [Co, N, P]: the GEMM works channel-major, tensors are batch-major.
template <typename T>
void swap_batch_channel(const T* src, T* dst, int64_t a, int64_t b, int64_t plane) {
  detail::parallel_for(0, a * b, std::max<int64_t>(1, kGrain / std::max<int64_t>(plane, 1)),
                       [&](int64_t lo, int64_t hi) {
                         for (int64_t t = lo; t < hi; ++t) {
                           const int64_t i = t / b, j = t % b;
                           std::copy(src + t * plane, src + (t + 1) * plane,
                                     dst + (j * a + i) * plane);
                         }
                       });
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    const Conv2dParams& p) {
  const Geometry g = geometry(x, w, p);
  dispatch_float(x.dtype(), "conv2d", [&]<typename T>() {
    // Workspaces are tensors: 64-byte aligned (Eigen's reductions peel unaligned heads, so an
    // address-dependent alignment would make results vary run to run) and counted in memory stats.
    Tensor cols_t = empty({g.k, g.cols()}, x.options()),
           out_t = empty({g.co, g.cols()}, x.options());
    T* cols = cols_t.data<T>();
    T* out = out_t.data<T>();  // [Co, N·Ho·Wo]
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      im2col(x.data<T>(), cols, g, p, grp * g.cg);
      const ConstMatrixMap<T> W(w.data<T>() + grp * g.cog * g.k, g.cog, g.k);
      MatrixMap<T> Y(out + grp * g.cog * g.cols(), g.cog, g.cols());
      parallel_gemm(W, ConstMatrixMap<T>(cols, g.k, g.cols()), Y);
    }
    if (b.defined()) {
      const T* pb = b.data<T>();
      detail::parallel_for(0, g.co, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) ArrayMap<T>(out + o * g.cols(), g.cols()) += pb[o];
      });
    }
    swap_batch_channel(out, y.data<T>(), g.co, g.n, g.ho * g.wo);  // [Co,N,P] -> [N,Co,P]
  });
}

void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                     Tensor& db, const Conv2dParams& p) {
  const Geometry g = geometry(x, w, p);
  dispatch_float(x.dtype(), "conv2d_backward", [&]<typename T>() {
    Tensor dyt_t = empty({g.co, g.cols()}, x.options());  // dY' = dy as [Co, N·Ho·Wo]
    T* dyt = dyt_t.data<T>();
    swap_batch_channel(dy.data<T>(), dyt, g.n, g.co, g.ho * g.wo);
    if (db.defined()) {  // db = Σ over (n, oy, ox) of dy
      T* pdb = db.data<T>();
      for (int64_t o = 0; o < g.co; ++o)
        pdb[o] = ConstArrayMap<T>(dyt + o * g.cols(), g.cols()).sum();
    }
    if (!dw.defined() && !dx.defined()) return;
    Tensor cols_t = empty({g.k, g.cols()}, x.options());
    T* cols = cols_t.data<T>();
    if (dx.defined()) std::fill(dx.data<T>(), dx.data<T>() + dx.numel(), T(0));
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const ConstMatrixMap<T> dY(dyt + grp * g.cog * g.cols(), g.cog, g.cols());
      if (dw.defined()) {  // dW = dY'·colsᵀ
        im2col(x.data<T>(), cols, g, p, grp * g.cg);
        MatrixMap<T> dW(dw.data<T>() + grp * g.cog * g.k, g.cog, g.k);
        parallel_gemm(dY, ConstMatrixMap<T>(cols, g.k, g.cols()).transpose(), dW);
      }
      if (dx.defined()) {  // dcols = Wᵀ·dY', then fold back into dx
        const ConstMatrixMap<T> W(w.data<T>() + grp * g.cog * g.k, g.cog, g.k);
        MatrixMap<T> dcols(cols, g.k, g.cols());
        parallel_gemm(W.transpose(), dY, dcols);
        col2im(cols, dx.data<T>(), g, p, grp * g.cg);
      }
    }
  });
}

}  // namespace tandem::cpu
