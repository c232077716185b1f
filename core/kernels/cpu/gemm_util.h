// core/kernels/cpu/gemm_util.h — C = A·B (or C += A·B) on all intra-op threads. The pool owns the
// threads: OpenBLAS (which Eigen's products call under EIGEN_USE_BLAS) is kept single-threaded by
// thread_pool.cpp, and a large product is split here into blocks of rows or columns, one per
// thread. Why not let OpenBLAS thread itself: its workers spin (sched_yield) for a long while after
// each call, so on 2 cores they fought the pool's workers through every non-GEMM op in a training
// step (a quarter of all CPU samples were sched_yield), and a multithreaded sgemm called from
// inside a pool task (a conv's per-sample GEMMs) would oversubscribe the cores or serialise.
// Measured on 2 cores: the CNN step ran 1.5–2× faster this way, the MLP step about the same.
#pragma once

#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>

namespace tandem::cpu {

/// c = a·b, or c += a·b with `accumulate`, for Eigen matrix expressions (maps, their transposes);
/// c must not alias a or b. Inside a pool task it runs on the calling thread.
template <typename A, typename B, typename C>
void parallel_gemm(const A& a, const B& b, C&& c, bool accumulate = false) {
  auto product = [&](auto&& c_part, const auto& a_part, const auto& b_part) {
    if (accumulate) {
      c_part.noalias() += a_part * b_part;
    } else {
      c_part.noalias() = a_part * b_part;
    }
  };
  const int64_t m = c.rows(), n = c.cols(), k = a.cols();
  const int threads = detail::in_parallel_region() ? 1 : get_num_threads();
  if (threads == 1 || m * n * k < (int64_t(1) << 20)) {  // under ~2 MFLOP a split costs more
    product(c, a, b);
    return;
  }
  if (n >= m) {  // split columns of C (and of b)
    const int64_t grain = std::max<int64_t>(16, (n + threads - 1) / threads);
    detail::parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
      product(c.middleCols(lo, hi - lo), a, b.middleCols(lo, hi - lo));
    });
  } else {  // split rows of C (and of a)
    const int64_t grain = std::max<int64_t>(16, (m + threads - 1) / threads);
    detail::parallel_for(0, m, grain, [&](int64_t lo, int64_t hi) {
      product(c.middleRows(lo, hi - lo), a.middleRows(lo, hi - lo), b);
    });
  }
}

}  // namespace tandem::cpu
