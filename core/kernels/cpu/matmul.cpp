// core/kernels/cpu/matmul.cpp — GEMM on Eigen maps. Built with EIGEN_USE_BLAS (the default when
// OpenBLAS is found), float/double products go to OpenBLAS's sgemm/dgemm (gemm_util.h), about
// 15 % faster than Eigen's own kernels on these machines (bench/gemm_bench.cpp measures it). Large
// products are split over the thread pool (gemm_util.h); OpenBLAS itself runs single-threaded.
// 16-bit products, and float32 ones on CPUs where oneDNN's kernels are faster, go to oneDNN
// (gemm_onednn.cpp).
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/gemm_util.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/dispatch_dtype.h>

namespace tandem::cpu {

// c = op(a)·op(b). a: [B?, M, K] ([B?, K, M] when trans_a), b: [B?, K, N] ([B?, N, K] when
// trans_b), c: [B?, M, N]; a 2-D a or b is shared by every batch entry. All contiguous.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  const int64_t m = c.size(-2), n = c.size(-1);
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t a_step = a.dim() == 3 ? m * k : 0, b_step = b.dim() == 3 ? k * n : 0;
  if (c.dtype() == DType::bf16 || c.dtype() == DType::f16)
    return gemm_16bit(a, b, c, trans_a, trans_b);
  if (c.dtype() == DType::f32 && k > 0 && c.numel() > 0 &&
      gemm_float32_onednn(a, b, c, trans_a, trans_b))
    return;
  dispatch_float(c.dtype(), "matmul", [&]<typename T>() {
    for (int64_t i = 0; i < batch; ++i) {
      const ConstMatrixMap<T> A(a.data<T>() + i * a_step, trans_a ? k : m, trans_a ? m : k);
      const ConstMatrixMap<T> B(b.data<T>() + i * b_step, trans_b ? n : k, trans_b ? k : n);
      MatrixMap<T> C(c.data<T>() + i * m * n, m, n);
      if (k == 0) {
        C.setZero();
      } else if (!trans_a && !trans_b) {
        parallel_gemm(A, B, C);
      } else if (trans_a && !trans_b) {
        parallel_gemm(A.transpose(), B, C);
      } else if (!trans_a && trans_b) {
        parallel_gemm(A, B.transpose(), C);
      } else {
        parallel_gemm(A.transpose(), B.transpose(), C);
      }
    }
  });
}

}  // namespace tandem::cpu
