// parallel/comm/nccl_names.h — NCCL's names for Tandem's dtypes and reductions, and the CUDA
// error check the NCCL communicator makes (nccl_communicator.cpp, the one file that includes
// nccl.h: NCCL is optional).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <tandem/core/check.h>
#include <tandem/core/dtype.h>
#include <tandem/parallel/comm/communicator.h>

namespace tandem::parallel::detail {

inline void cuda_check(cudaError_t e, const char* what, int rank) {
  TD_CHECK_AS(CudaError, e == cudaSuccess, "nccl communicator (rank ", rank, "): ", what,
              " failed: ", cudaGetErrorString(e));
}

// The dtype table's NCCL column, checked against nccl.h here, where it is included.
static_assert(info(kFloat32).nccl == ncclFloat32 && info(kFloat64).nccl == ncclFloat64 &&
              info(kInt64).nccl == ncclInt64 && info(kBFloat16).nccl == ncclBfloat16 &&
              info(kFloat16).nccl == ncclFloat16);

inline ncclDataType_t nccl_dtype(DType d) {
  TD_CHECK_DTYPE(info(d).nccl >= 0, "nccl: unsupported dtype ", d);
  return static_cast<ncclDataType_t>(info(d).nccl);
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Mean:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::ArgMax:  // refused by check_reduce_op before
      break;
  }
  return ncclSum;
}

}  // namespace tandem::parallel::detail
