// core/kernels/cuda/matmul.cu — GEMM through cuBLAS. cuBLAS is column-major, and a row-major
// [R, C] matrix is the column-major [C, R] matrix of its transpose, so c = op(a)·op(b) is computed
// as cᵀ = op(b)ᵀ·op(a)ᵀ with the operands swapped and no copies. A batch is one strided-batched
// call; a 2-D operand shared by every batch entry has stride 0. bfloat16 and float16 go through
// cublasGemmEx with float32 compute (tensor cores on sm_80+).
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/handles.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/layout.h>
#include <climits>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

// One name for the float and double entry points (alpha, beta on the host).
cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const float* alpha, const float* a, int lda, const float* b,
                         int ldb, const float* beta, float* c, int ldc) {
  return cublas().Sgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                         int k, const double* alpha, const double* a, int lda, const double* b,
                         int ldb, const double* beta, double* c, int ldc) {
  return cublas().Dgemm(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
cublasStatus_t gemm_batched_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                 int m, int n, int k, const float* alpha, const float* a, int lda,
                                 long long sa, const float* b, int ldb, long long sb,
                                 const float* beta, float* c, int ldc, long long sc, int batch) {
  return cublas().SgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                                      ldc, sc, batch);
}
cublasStatus_t gemm_batched_call(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                 int m, int n, int k, const double* alpha, const double* a, int lda,
                                 long long sa, const double* b, int ldb, long long sb,
                                 const double* beta, double* c, int ldc, long long sc, int batch) {
  return cublas().DgemmStridedBatched(h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c,
                                      ldc, sc, batch);
}

// cuBLAS takes sizes and leading dimensions as int.
int as_int(int64_t v, const char* what) {
  TD_CHECK_VALUE(v <= INT_MAX, "matmul: ", what, " ", v, " is larger than cuBLAS's limit ",
                 INT_MAX);
  return int(v);
}

}  // namespace

// c = op(a)·op(b). a: [B?, M, K] ([B?, K, M] when trans_a), b: [B?, K, N] ([B?, N, K] when
// trans_b), c: [B?, M, N]; a 2-D a or b is shared by every batch entry. As on the CPU, operands
// are taken as contiguous (a strided one is copied first).
void gemm(const Tensor& a_in, const Tensor& b_in, Tensor& c, bool trans_a, bool trans_b) {
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  const int64_t m = c.size(-2), n = c.size(-1);
  const int64_t k = trans_a ? a_in.size(-2) : a_in.size(-1);
  if (c.numel() == 0) return;
  DeviceGuard guard(c.device());
  if (k == 0) {  // an empty sum is 0; cuBLAS needs lda >= 1, so it is not asked
    TD_CUDA_CHECK(cudaMemsetAsync(c.data_ptr(), 0, c.nbytes(), stream()));
    return;
  }
  const Tensor a = ::tandem::detail::contiguous(a_in), b = ::tandem::detail::contiguous(b_in);
  // Column-major view: C'[n, m] = op_b(B')[n, k] · op_a(A')[k, m], where B' is b's buffer read
  // column-major ([n, k] with ld n, or [k, n] with ld k transposed) and likewise A'.
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int mi = as_int(m, "rows"), ni = as_int(n, "columns"), ki = as_int(k, "inner size");
  const int lda = trans_a ? mi : ki, ldb = trans_b ? ki : ni;
  const long long stride_a = a.dim() == 3 ? m * k : 0, stride_b = b.dim() == 3 ? k * n : 0;
  cublasHandle_t h = cublas_handle(c.device().index());
  if (c.dtype() == DType::bf16 || c.dtype() == DType::f16) {
    // 16-bit inputs and output, float32 accumulation: cuBLAS runs it on the tensor cores.
    const cudaDataType_t type = c.dtype() == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1, zero = 0;
    if (batch == 1) {
      TD_CUBLAS_CHECK(cublas().GemmEx(h, op_b, op_a, ni, mi, ki, &one, b.data_ptr(), type, ldb,
                                      a.data_ptr(), type, lda, &zero, c.data_ptr(), type, ni,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      TD_CUBLAS_CHECK(cublas().GemmStridedBatchedEx(
          h, op_b, op_a, ni, mi, ki, &one, b.data_ptr(), type, ldb, stride_b, a.data_ptr(), type,
          lda, stride_a, &zero, c.data_ptr(), type, ni, m * n, as_int(batch, "batch"),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return;
  }
  dispatch_float(c.dtype(), "matmul", [&]<typename T>() {
    const T one = 1, zero = 0;
    if (batch == 1) {
      TD_CUBLAS_CHECK(gemm_call(h, op_b, op_a, ni, mi, ki, &one, b.data<T>(), ldb, a.data<T>(), lda,
                                &zero, c.data<T>(), ni));
    } else {
      TD_CUBLAS_CHECK(gemm_batched_call(h, op_b, op_a, ni, mi, ki, &one, b.data<T>(), ldb, stride_b,
                                        a.data<T>(), lda, stride_a, &zero, c.data<T>(), ni, m * n,
                                        as_int(batch, "batch")));
    }
  });
}

}  // namespace tandem::cuda
