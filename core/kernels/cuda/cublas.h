// core/kernels/cuda/cublas.h — cuBLAS, opened when the first matrix product runs on a GPU.
//
// Why not link it: libcublas needs libcublasLt (540 MB), and mapping and relocating that costs
// every process that loads Tandem about 0.13 s of CPU and 25,000 page faults, GPU or not: each
// CPU-only `tandem` command, each test, each rank a launcher starts. Opened on first use, it costs
// only the processes that multiply matrices on a GPU. (cuDNN's own library already defers its
// large parts; cudart is small.) The entry points keep cuBLAS's names, less the prefix, so
// `cublas().Sgemm(...)` reads as the cuBLAS documentation's cublasSgemm.
#pragma once

#include <cublas_v2.h>

namespace tandem::cuda {

/// The cuBLAS functions the CUDA kernels call. cublas_v2.h maps some names to their _v2 symbols
/// (cublasSgemm is cublasSgemm_v2); the types here and the symbols looked up follow it.
struct Cublas {
  decltype(&cublasCreate) Create;
  decltype(&cublasDestroy) Destroy;
  decltype(&cublasSetStream) SetStream;
  decltype(&cublasSetMathMode) SetMathMode;
  decltype(&cublasGetStatusString) GetStatusString;
  decltype(&cublasGetProperty) GetProperty;
  decltype(&cublasSgemm) Sgemm;
  decltype(&cublasDgemm) Dgemm;
  decltype(&cublasSgemmStridedBatched) SgemmStridedBatched;
  decltype(&cublasDgemmStridedBatched) DgemmStridedBatched;
  // These two are overloaded in C++ (an inline wrapper takes the old cudaDataType compute type):
  // the library's own take a cublasComputeType_t.
  cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n,
                           int k, const void* alpha, const void* A, cudaDataType, int lda,
                           const void* B, cudaDataType, int ldb, const void* beta, void* C,
                           cudaDataType, int ldc, cublasComputeType_t, cublasGemmAlgo_t);
  cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                         int m, int n, int k, const void* alpha, const void* A,
                                         cudaDataType, int lda, long long stride_a, const void* B,
                                         cudaDataType, int ldb, long long stride_b,
                                         const void* beta, void* C, cudaDataType, int ldc,
                                         long long stride_c, int batch, cublasComputeType_t,
                                         cublasGemmAlgo_t);
};

/// cuBLAS, opened on the first call (libcublas.so.<the major version compiled against>); later
/// calls return the same table. Throws a CudaError naming the library and the loader's reason if
/// it cannot be opened or lacks a function.
const Cublas& cublas();

}  // namespace tandem::cuda
