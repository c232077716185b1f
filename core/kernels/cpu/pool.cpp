// core/kernels/cpu/pool.cpp — max and average pooling over NCHW, parallel over (n, c) planes.
// Max pooling records where each maximum came from, so backward is a scatter of dy.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <limits>

namespace tandem::cpu {
namespace {

struct Planes {
  int64_t planes, h, w, ho, wo;
};

Planes planes(const Tensor& x, const Tensor& y) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2), y.size(3)};
}

// Runs fn(plane) over every (n, c) plane, a few planes per task.
template <typename F>
void each_plane(const Planes& s, F fn) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(s.h * s.w, 1));
  detail::parallel_for(0, s.planes, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t q = lo; q < hi; ++q) fn(q);
  });
}

// relu(v) as UnaryOp::Relu computes it: a NaN stays NaN.
template <typename T>
T relu_of(T v) {
  return v < T(0) ? T(0) : v;
}

// The 2×2, stride-2, unpadded window (nn.MaxPool2d(2), by far the most common), over planes
// [q0, q1). A branch on `v > best` is a coin flip on real activations, and its mispredictions made
// pooling cost as much as a convolution; so the four inputs of a block of windows are first copied
// into four arrays, a row of windows at a time (stride-2 loads the compiler vectorises), and the
// selection then runs over the arrays as a straight, vectorised loop. Blocks span rows and planes,
// so small planes (5×5 outputs) run full vectors as well as large ones. Relu (a template
// argument, so the loop stays straight) clamps each maximum as it is stored.
template <typename T, bool Relu>
void max_pool_2x2(const T* x, T* y, int64_t* idx, const Planes& s, int64_t q0, int64_t q1) {
  constexpr int64_t kBlock = 256;
  alignas(64) T a[kBlock], b[kBlock], c[kBlock], d[kBlock];
  alignas(64) int64_t at[kBlock];
  const int64_t w = s.w, wo = s.wo, total = (q1 - q0) * s.ho * wo;
  int64_t q = q0, oy = 0, ox = 0;
  for (int64_t j0 = 0; j0 < total; j0 += kBlock) {
    const int64_t len = std::min(kBlock, total - j0);
    for (int64_t k = 0; k < len;) {  // one run of a row of windows per pass
      const int64_t run = std::min(wo - ox, len - k), top = 2 * oy * w;  // the row's first input
      const T* __restrict r0 = x + q * s.h * w + top;
      const T* __restrict r1 = r0 + w;
      for (int64_t t = 0; t < run; ++t) {
        const int64_t col = 2 * (ox + t);
        a[k + t] = r0[col], b[k + t] = r0[col + 1], c[k + t] = r1[col], d[k + t] = r1[col + 1];
        at[k + t] = top + col;
      }
      k += run, ox += run;
      if (ox == wo) {
        ox = 0;
        if (++oy == s.ho) oy = 0, ++q;
      }
    }
    T* __restrict out = y + q0 * s.ho * wo + j0;
    int64_t* __restrict where_out = idx + q0 * s.ho * wo + j0;
    for (int64_t k = 0; k < len; ++k) {
      T best = a[k];  // the first maximum wins; a NaN is taken (and so propagates)
      int64_t off = 0;
      bool t = (b[k] > best) | (b[k] != b[k]);
      best = t ? b[k] : best, off = t ? 1 : off;
      t = (c[k] > best) | (c[k] != c[k]);
      best = t ? c[k] : best, off = t ? w : off;
      t = (d[k] > best) | (d[k] != d[k]);
      best = t ? d[k] : best, off = t ? w + 1 : off;
      if constexpr (Relu) {
        out[k] = relu_of(best);
        where_out[k] = best > T(0) ? at[k] + off : -1;
      } else {
        out[k] = best;
        where_out[k] = at[k] + off;
      }
    }
  }
}

bool is_two_by_two(const Pool2dParams& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
         p.pad_w == 0;
}

// Both max poolings in one loop; with relu, a window whose maximum is not > 0 (relu's gradient
// there is 0) records index −1. Relu is a template argument in the 2×2 path, so its loop stays
// straight.
void max_pool(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p, bool relu) {
  const Planes s = planes(x, y);
  const bool two_by_two = is_two_by_two(p);
  dispatch_float(x.dtype(), "max_pool2d", [&]<typename T>() {
    if (two_by_two) {
      const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(s.h * s.w, 1));
      const auto pool = relu ? max_pool_2x2<T, true> : max_pool_2x2<T, false>;
      detail::parallel_for(0, s.planes, grain, [&](int64_t q0, int64_t q1) {
        pool(x.data<T>(), y.data<T>(), indices.data<int64_t>(), s, q0, q1);
      });
      return;
    }
    each_plane(s, [&](int64_t q) {
      const T* in = x.data<T>() + q * s.h * s.w;
      T* out = y.data<T>() + q * s.ho * s.wo;
      int64_t* idx = indices.data<int64_t>() + q * s.ho * s.wo;
      for (int64_t oy = 0; oy < s.ho; ++oy)
        for (int64_t ox = 0; ox < s.wo; ++ox) {
          // The window, clipped to the input (without padding it is always inside).
          const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
          const int64_t ya = std::max<int64_t>(y0, 0), yb = std::min(y0 + p.kernel_h, s.h);
          const int64_t xa = std::max<int64_t>(x0, 0), xb = std::min(x0 + p.kernel_w, s.w);
          int64_t where = ya * s.w + xa;
          T best = in[where];
          for (int64_t iy = ya; iy < yb; ++iy)
            for (int64_t ix = xa; ix < xb; ++ix) {
              const T v = in[iy * s.w + ix];
              const bool take = v > best || v != v;  // first maximum; NaN propagates
              best = take ? v : best;
              where = take ? iy * s.w + ix : where;
            }
          out[oy * s.wo + ox] = relu ? relu_of(best) : best;
          idx[oy * s.wo + ox] = relu && !(best > T(0)) ? -1 : where;
        }
    });
  });
}

}  // namespace

void max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p) {
  max_pool(x, y, indices, p, /*relu=*/false);
}

void relu_max_pool2d_forward(const Tensor& x, Tensor& y, Tensor& indices, const Pool2dParams& p) {
  max_pool(x, y, indices, p, /*relu=*/true);
}

// dx[argmax] += dy, skipping windows with index −1 (clamped by a fused relu)
// (A 2×2 path that wrote each dx element once, with no fill, was 3× slower than this fill and
// scatter: its stride-2 conditional stores do not vectorise, and the fill is a fast memset.)
void max_pool2d_backward(const Tensor& dy, const Tensor& indices, Tensor& dx, const Pool2dParams&) {
  const Planes s = planes(dx, dy);
  dispatch_float(dy.dtype(), "max_pool2d_backward", [&]<typename T>() {
    each_plane(s, [&](int64_t q) {
      T* out = dx.data<T>() + q * s.h * s.w;
      std::fill(out, out + s.h * s.w, T(0));
      const T* g = dy.data<T>() + q * s.ho * s.wo;
      const int64_t* idx = indices.data<int64_t>() + q * s.ho * s.wo;
      for (int64_t o = 0; o < s.ho * s.wo; ++o)
        if (idx[o] >= 0) out[idx[o]] += g[o];
    });
  });
}

// Window size for an average: the whole window with count_include_pad, else the part inside.
static int64_t window(const Planes& s, const Pool2dParams& p, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * p.stride_h - p.pad_h, x0 = ox * p.stride_w - p.pad_w;
  if (p.count_include_pad) {
    const int64_t y1 = std::min(y0 + p.kernel_h, s.h + p.pad_h),
                  x1 = std::min(x0 + p.kernel_w, s.w + p.pad_w);
    return (y1 - y0) * (x1 - x0);
  }
  const int64_t y1 = std::min(y0 + p.kernel_h, s.h), x1 = std::min(x0 + p.kernel_w, s.w);
  return (y1 - std::max<int64_t>(y0, 0)) * (x1 - std::max<int64_t>(x0, 0));
}

void avg_pool2d_forward(const Tensor& x, Tensor& y, const Pool2dParams& p) {
  const Planes s = planes(x, y);
  dispatch_float(x.dtype(), "avg_pool2d", [&]<typename T>() {
    each_plane(s, [&](int64_t q) {
      const T* in = x.data<T>() + q * s.h * s.w;
      T* out = y.data<T>() + q * s.ho * s.wo;
      for (int64_t oy = 0; oy < s.ho; ++oy)
        for (int64_t ox = 0; ox < s.wo; ++ox) {
          T sum = 0;
          for (int64_t iy = std::max<int64_t>(oy * p.stride_h - p.pad_h, 0);
               iy < std::min(oy * p.stride_h - p.pad_h + p.kernel_h, s.h); ++iy)
            for (int64_t ix = std::max<int64_t>(ox * p.stride_w - p.pad_w, 0);
                 ix < std::min(ox * p.stride_w - p.pad_w + p.kernel_w, s.w); ++ix)
              sum += in[iy * s.w + ix];
          out[oy * s.wo + ox] = sum / T(window(s, p, oy, ox));
        }
    });
  });
}

// dx[window] += dy / window size
void avg_pool2d_backward(const Tensor& dy, Tensor& dx, const Pool2dParams& p) {
  const Planes s = planes(dx, dy);
  dispatch_float(dy.dtype(), "avg_pool2d_backward", [&]<typename T>() {
    each_plane(s, [&](int64_t q) {
      T* out = dx.data<T>() + q * s.h * s.w;
      std::fill(out, out + s.h * s.w, T(0));
      const T* g = dy.data<T>() + q * s.ho * s.wo;
      for (int64_t oy = 0; oy < s.ho; ++oy)
        for (int64_t ox = 0; ox < s.wo; ++ox) {
          const T share = g[oy * s.wo + ox] / T(window(s, p, oy, ox));
          for (int64_t iy = std::max<int64_t>(oy * p.stride_h - p.pad_h, 0);
               iy < std::min(oy * p.stride_h - p.pad_h + p.kernel_h, s.h); ++iy)
            for (int64_t ix = std::max<int64_t>(ox * p.stride_w - p.pad_w, 0);
                 ix < std::min(ox * p.stride_w - p.pad_w + p.kernel_w, s.w); ++ix)
              out[iy * s.w + ix] += share;
        }
    });
  });
}

}  // namespace tandem::cpu
