// core/kernels/cpu/reduce.cpp — reductions over the last dim of [M, K] (rows) or the first dim of
// [K, M] (cols). The op layer (autograd/ops/reduce.cpp) permutes any set of dims into one of these
// two forms, so these two loops serve sum/mean/max/min/argmax over any dims.
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/runs.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/widen.h>

namespace tandem::cpu {
namespace {

template <typename T>
T reduce_row(ReduceOp op, const ConstArrayMap<T>& row) {
  switch (op) {
    case ReduceOp::Sum:
      return row.sum();
    case ReduceOp::Mean:
      return row.size() ? T(row.sum() / T(row.size())) : T(NAN);
    case ReduceOp::Max:  // NaN if the row holds one, as torch.amax (eigen.h)
      return max_or_nan(row);
    case ReduceOp::Min:
      return min_or_nan(row);
    case ReduceOp::ArgMax:
      break;
  }
  return T(0);
}

// Whether x[i] takes the place of the best so far in argmax: the first maximum, or the first NaN
// (torch.argmax ranks NaN above every number; a comparison alone would never pick a NaN).
template <typename T>
bool beats(T x, T best) {
  return best == best && (x > best || x != x);
}

}  // namespace

void reduce_rows(ReduceOp op, const Tensor& x, Tensor& out) {
  const int64_t m = out.numel(), k = m ? x.numel() / m : 0;
  dispatch_numeric(x.dtype(), name(op), [&]<typename T>() {
    const T* px = x.data<T>();
    if (op == ReduceOp::ArgMax) {
      int64_t* po = out.data<int64_t>();
      detail::parallel_for(0, m, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)),
                           [&](int64_t lo, int64_t hi) {
                             for (int64_t r = lo; r < hi; ++r) {
                               const T* row = px + r * k;
                               int64_t best = 0;
                               for (int64_t i = 1; i < k; ++i)
                                 if (beats(row[i], row[best])) best = i;
                               po[r] = best;
                             }
                           });
      return;
    }
    T* po = out.data<T>();
    if (m == 1 && k >= 4 * kGrain && (op == ReduceOp::Sum || op == ReduceOp::Mean)) {
      // One long row (a full reduction): partial sums per thread, then a short serial sum.
      const int64_t parts = std::min<int64_t>(64, k / kGrain);
      std::vector<T> partial(size_t(parts), T(0));
      detail::parallel_for(0, parts, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          const int64_t b = k * p / parts, e = k * (p + 1) / parts;
          partial[size_t(p)] = ConstArrayMap<T>(px + b, e - b).sum();
        }
      });
      T total = T(0);
      for (T v : partial) total += v;
      po[0] = op == ReduceOp::Mean ? T(total / T(k)) : total;
      return;
    }
    detail::parallel_for(0, m, std::max<int64_t>(1, kGrain / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           for (int64_t r = lo; r < hi; ++r)
                             po[r] = reduce_row<T>(op, ConstArrayMap<T>(px + r * k, k));
                         });
  });
}

void reduce_cols(ReduceOp op, const Tensor& x, Tensor& out) {
  const int64_t m = out.numel(), k = m ? x.numel() / m : 0;
  if (detail::computes_wider(x)) {
    // bfloat16/float16 sums (the bias gradient of a 16-bit layer): each row widened once into a
    // float32 accumulator per block of columns, rounded once. The rest go through float32 copies.
    if (op != ReduceOp::Sum && op != ReduceOp::Mean) return widened<reduce_cols>(op, x, out);
    dispatch<TypeList<BFloat16, Float16>>(x.dtype(), name(op), [&]<typename T>() {
      const T* px = x.data<T>();
      T* po = out.data<T>();
      detail::parallel_for(0, m, std::max<int64_t>(256, kGrain / std::max<int64_t>(k, 1)),
                           [&](int64_t lo, int64_t hi) {
                             const int64_t n = hi - lo;
                             Array1<float> acc = Array1<float>::Zero(n);
                             for (int64_t r = 0; r < k; ++r)
                               operand<0>(px + r * m + lo, 1, n,
                                          [&](const auto& row) { acc += row; });
                             if (op == ReduceOp::Mean) acc /= float(k);  // k = 0: NaN, as torch
                             for (int64_t j = 0; j < n; ++j) po[lo + j] = T(acc[j]);
                           });
    });
    return;
  }
  dispatch_numeric(x.dtype(), name(op), [&]<typename T>() {
    const T* px = x.data<T>();
    // Each task owns a block of columns and walks down the rows, so every access is contiguous.
    detail::parallel_for(0, m, std::max<int64_t>(256, kGrain / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           const int64_t n = hi - lo;
                           if (op == ReduceOp::ArgMax) {
                             int64_t* idx = out.data<int64_t>() + lo;
                             std::vector<T> best(px + lo, px + hi);
                             std::fill(idx, idx + n, 0);
                             for (int64_t r = 1; r < k; ++r)
                               for (int64_t j = 0; j < n; ++j)
                                 if (beats(px[r * m + lo + j], best[size_t(j)])) {
                                   best[size_t(j)] = px[r * m + lo + j];
                                   idx[j] = r;
                                 }
                             return;
                           }
                           ArrayMap<T> acc(out.data<T>() + lo, n);
                           if (k == 0) {
                             acc.setConstant(op == ReduceOp::Mean ? T(NAN) : T(0));
                             return;
                           }
                           acc = ConstArrayMap<T>(px + lo, n);
                           for (int64_t r = 1; r < k; ++r) {
                             const ConstArrayMap<T> row(px + r * m + lo, n);
                             switch (op) {
                               case ReduceOp::Sum:
                               case ReduceOp::Mean:
                                 acc += row;
                                 break;
                               case ReduceOp::Max:  // NaN from either side (eigen.h)
                                 acc = acc.binaryExpr(row, NanMax<T>());
                                 break;
                               case ReduceOp::Min:
                                 acc = acc.binaryExpr(row, NanMin<T>());
                                 break;
                               case ReduceOp::ArgMax:
                                 break;
                             }
                           }
                           if (op == ReduceOp::Mean) acc /= T(k);
                         });
  });
}

}  // namespace tandem::cpu
