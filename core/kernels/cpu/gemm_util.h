// core/kernels/cpu/gemm_util.h — C = A·B (or C += A·B) on all intra-op threads. The pool owns the
// threads: OpenBLAS (called by blas_gemm below in a BLAS build) is kept single-threaded by
// thread_pool.cpp, and a large product is split here into blocks of rows or columns, one per
// thread. Why not let OpenBLAS thread itself: its workers spin (sched_yield) for a long while after
// each call, so on 2 cores they fought the pool's workers through every non-GEMM op in a training
// step (a quarter of all CPU samples were sched_yield), and a multithreaded sgemm called from
// inside a pool task (a conv's per-sample GEMMs) would oversubscribe the cores or serialise.
// (bench/HISTORY.md: what this and blas_gemm's clearing measured.)
#pragma once

#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <type_traits>

namespace tandem::cpu {

/// An Eigen expression with a pointer and strides (a map, a block of one, a transposed view).
template <typename X>
concept DenseView = requires(const X& x) {
  x.data();
  x.outerStride();
  x.innerStride();
};

/// c = a·b or c += a·b by one BLAS call, when a, b and c are dense views (maps, their blocks and
/// transposes) of float or double; false if not (Eigen evaluates it then). This is what Eigen's
/// `c.noalias() = a·b` does under EIGEN_USE_BLAS, minus its expression machinery, and it covers
/// blocks of transposed views (the column splits below) without a question of what Eigen picks.
template <typename A, typename B, typename C>
bool blas_gemm([[maybe_unused]] const A& a, [[maybe_unused]] const B& b, [[maybe_unused]] C& c,
               [[maybe_unused]] bool accumulate) {
#ifdef EIGEN_USE_BLAS  // sgemm_/dgemm_ are declared by Eigen (Eigen/src/misc/blas.h)
  using T = typename std::decay_t<C>::Scalar;
  if constexpr ((std::is_same_v<T, float> || std::is_same_v<T, double>)&&DenseView<A> &&
                DenseView<B> && DenseView<std::decay_t<C>> && std::decay_t<C>::IsRowMajor) {
    const int64_t m = c.rows(), n = c.cols(), k = a.cols();
    if (m == 0 || n == 0 || k == 0 || a.innerStride() != 1 || b.innerStride() != 1 ||
        c.innerStride() != 1 ||
        std::max({m, n, k, int64_t(a.outerStride()), int64_t(b.outerStride()),
                  int64_t(c.outerStride())}) > int64_t(INT32_MAX))
      return false;
    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: a row-major operand's buffer, read
    // column-major, is already its transpose ('N'); a column-major one (a transposed view) is 'T'.
    const char tb = std::decay_t<B>::IsRowMajor ? 'N' : 'T',
               ta = std::decay_t<A>::IsRowMajor ? 'N' : 'T';
    const int im = int(m), in = int(n), ik = int(k), lda = int(a.outerStride()),
              ldb = int(b.outerStride()), ldc = int(c.outerStride());
    // beta = 0 would make OpenBLAS zero c with its own sgemm_beta kernel, which is slower than a
    // plain fill; so c is cleared here and the product always accumulates.
    if (!accumulate)
      for (int64_t r = 0; r < m; ++r) std::fill_n(c.data() + r * c.outerStride(), n, T(0));
    const T one = 1;
    if constexpr (std::is_same_v<T, float>) {
      sgemm_(&tb, &ta, &in, &im, &ik, &one, b.data(), &ldb, a.data(), &lda, &one, c.data(), &ldc);
    } else {
      dgemm_(&tb, &ta, &in, &im, &ik, &one, b.data(), &ldb, a.data(), &lda, &one, c.data(), &ldc);
    }
    return true;
  }
#endif
  return false;
}

/// Products of fewer multiply-adds than this run on one thread: under ~2 MFLOP a split costs more.
inline constexpr int64_t kSplitMinMacs = int64_t(1) << 20;

/// c = a·b, or c += a·b with `accumulate`, for Eigen matrix expressions (maps, their transposes);
/// c must not alias a or b. Inside a pool task it runs on the calling thread.
template <typename A, typename B, typename C>
void parallel_gemm(const A& a, const B& b, C&& c, bool accumulate = false) {
  auto product = [&](auto&& c_part, const auto& a_part, const auto& b_part) {
    if (blas_gemm(a_part, b_part, c_part, accumulate)) return;
    if (accumulate) {
      c_part.noalias() += a_part * b_part;
    } else {
      c_part.noalias() = a_part * b_part;
    }
  };
  const int64_t m = c.rows(), n = c.cols(), k = a.cols();
  const int threads = detail::in_parallel_region() ? 1 : get_num_threads();
  if (threads == 1 || m * n * k < kSplitMinMacs) {
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
