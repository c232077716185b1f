// core/kernels/cpu/gemm_util.h — C = A·B on all intra-op threads. With OpenBLAS (the default) the
// product goes to sgemm, which threads itself (thread_pool.cpp sets its thread count): measured
// 0.99–1.03× cblas_sgemm on the MNIST shapes. Without it (TANDEM_USE_BLAS=OFF, Eigen built with
// EIGEN_DONT_PARALLELIZE), large products are split over the pool by blocks of rows or columns.
// (Splitting over the pool with OpenBLAS single-threaded was measured too: 0.86–0.96× sgemm on
// 2 threads, better for the CNN step, worse for the MLP step; see bench/.)
#pragma once

#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>

namespace tandem::cpu {

/// c = a·b for Eigen matrix expressions (maps, their transposes); c must not alias a or b.
template <typename A, typename B, typename C>
void parallel_gemm(const A& a, const B& b, C&& c) {
#if TANDEM_WITH_BLAS
  c.noalias() = a * b;
  return;
#endif
  const int64_t m = c.rows(), n = c.cols(), k = a.cols();
  const int threads = get_num_threads();
  if (threads == 1 || m * n * k < (int64_t(1) << 20)) {  // under ~2 MFLOP a split costs more
    c.noalias() = a * b;
    return;
  }
  if (n >= m) {  // split columns of C (and of b)
    const int64_t grain = std::max<int64_t>(16, (n + threads - 1) / threads);
    detail::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
      c.middleCols(lo, hi - lo).noalias() = a * b.middleCols(lo, hi - lo);
    });
  } else {  // split rows of C (and of a)
    const int64_t grain = std::max<int64_t>(16, (m + threads - 1) / threads);
    detail::parallel_for(0, m, grain, [&](int64_t lo, int64_t hi) {
      c.middleRows(lo, hi - lo).noalias() = a.middleRows(lo, hi - lo) * b;
    });
  }
}

}  // namespace tandem::cpu
