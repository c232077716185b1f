// core/kernels/cpu/index.cpp — gather, scatter-add, top-k and multinomial sampling along the last
// dim of contiguous [M, N] rows, a row per task. Indices are checked before they are used.
#include <tandem/core/check.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace tandem::cpu {
namespace {

void check_index(const int64_t* index, int64_t count, int64_t n, const char* op) {
  for (int64_t i = 0; i < count; ++i)
    TD_CHECK_INDEX(index[i] >= 0 && index[i] < n, op, ": index ", index[i], " at position ", i,
                   " is out of range for a dim of size ", n);
}

}  // namespace

void gather(const Tensor& x, const Tensor& index, Tensor& out) {
  dispatch_numeric(x.dtype(), "gather", [&]<typename T>() {
    const int64_t n = x.size(-1), k = index.size(-1), m = k ? index.numel() / k : 0;
    const int64_t* pi = index.data<int64_t>();
    check_index(pi, index.numel(), n, "gather");
    const T* px = x.data<T>();
    T* po = out.data<T>();
    detail::parallel_for(0, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           for (int64_t r = lo; r < hi; ++r)
                             for (int64_t j = 0; j < k; ++j)
                               po[r * k + j] = px[r * n + pi[r * k + j]];
                         });
  });
}

void scatter_add(const Tensor& index, const Tensor& src, Tensor& out) {
  dispatch_numeric(src.dtype(), "scatter_add", [&]<typename T>() {
    const int64_t n = out.size(-1), k = index.size(-1), m = k ? index.numel() / k : 0;
    const int64_t* pi = index.data<int64_t>();
    check_index(pi, index.numel(), n, "scatter_add");
    const T* ps = src.data<T>();
    T* po = out.data<T>();
    std::fill_n(po, out.numel(), T(0));
    detail::parallel_for(0, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(k, 1)),
                         [&](int64_t lo, int64_t hi) {
                           for (int64_t r = lo; r < hi; ++r)
                             for (int64_t j = 0; j < k; ++j)
                               po[r * n + pi[r * k + j]] += ps[r * k + j];
                         });
  });
}

void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  dispatch_numeric(x.dtype(), "topk", [&]<typename T>() {
    const int64_t n = x.size(-1), m = n ? x.numel() / n : 0;
    const T* px = x.data<T>();
    T* pv = values.data<T>();
    int64_t* pi = indices.data<int64_t>();
    detail::parallel_for(0, m, 1, [&](int64_t lo, int64_t hi) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = px + r * n;
        std::iota(order.begin(), order.end(), int64_t(0));
        // NaN ranks above every number (as PyTorch's largest), ties go to the lower index.
        auto before = [&](int64_t a, int64_t b) {
          const T va = row[a], vb = row[b];
          const bool na = va != va, nb = vb != vb;
          if (na || nb) return na && (!nb || a < b);
          if (va != vb) return largest ? va > vb : va < vb;
          return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        for (int64_t j = 0; j < k; ++j) {
          pi[r * k + j] = order[size_t(j)];
          pv[r * k + j] = row[order[size_t(j)]];
        }
      }
    });
  });
}

void multinomial(const Tensor& probs, int64_t samples, bool replacement, GeneratorState rng,
                 Tensor& out) {
  dispatch_float(probs.dtype(), "multinomial", [&]<typename T>() {
    const int64_t n = probs.size(-1), m = n ? probs.numel() / n : 0;
    const T* pp = probs.data<T>();
    int64_t* po = out.data<int64_t>();
    for (int64_t r = 0; r < m;
         ++r) {  // checked first, on this thread: the error is the first row's
      T total = T(0);
      int64_t positive = 0;
      for (int64_t j = 0; j < n; ++j) {
        const T v = pp[r * n + j];
        TD_CHECK_VALUE(v >= T(0) && std::isfinite(v), "multinomial: row ", r, " has ", v, " at ", j,
                       "; probabilities must be finite and not negative");
        total += v;
        positive += v > T(0);
      }
      TD_CHECK_VALUE(total > T(0), "multinomial: row ", r, " sums to 0");
      TD_CHECK_VALUE(replacement || samples <= positive, "multinomial: ", samples,
                     " samples without replacement, but row ", r, " has ", positive,
                     " categories of nonzero probability");
    }
    detail::parallel_for(0, m, 1, [&](int64_t lo, int64_t hi) {
      std::vector<T> w(static_cast<size_t>(n));
      for (int64_t r = lo; r < hi; ++r) {
        std::copy_n(pp + r * n, n, w.begin());
        for (int64_t s = 0; s < samples; ++s) {
          T total = T(0);
          for (T v : w) total += v;
          const uint64_t counter = rng.offset + uint64_t(r * samples + s);
          const T u = philox_unit<T>(philox(counter, rng.seed), 0) * total;
          // The first category whose running sum passes u (never one of weight 0).
          int64_t pick = n - 1;
          T run = T(0);
          for (int64_t j = 0; j < n; ++j) {
            run += w[size_t(j)];
            if (u < run && w[size_t(j)] > T(0)) {
              pick = j;
              break;
            }
          }
          while (w[size_t(pick)] == T(0) && pick > 0) --pick;  // u rounded past the last weight
          po[r * samples + s] = pick;
          if (!replacement) w[size_t(pick)] = T(0);
        }
      }
    });
  });
}

}  // namespace tandem::cpu
