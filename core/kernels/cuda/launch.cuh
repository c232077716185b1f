// core/kernels/cuda/launch.cuh — what every CUDA kernel file shares: the launch shape, a
// grid-stride loop, the current stream, and StridedIndex, which turns a linear element index of
// the output's shape into an operand's offset (any strides; stride 0 is broadcasting), so
// elementwise kernels take views as they come, like the CPU ones (cpu/strided.h).
#pragma once

#include <cuda_runtime.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/tensor.h>
#include <algorithm>
#include <cstdint>
#include <tandem/core/kernels/cuda/device_math.cuh>

namespace tandem::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;
inline constexpr int kMaxDims = 8;

/// Laid out exactly like `out` (contiguous, same shape), so one plain index walks both.
inline bool dense_like(const Tensor& t, const Tensor& out) {
  return t.is_contiguous() && t.shape() == out.shape();
}

/// Outputs are written with a plain index: kernels.h promises them contiguous.
inline void check_output(const Tensor& out, const char* op) {
  TD_INTERNAL_ASSERT(out.is_contiguous(), op, ": the CUDA kernel needs a contiguous output");
}

/// Blocks for n elements with a grid-stride loop: enough to fill the GPU, no more.
inline unsigned blocks_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535 * 8));
}

/// The stream kernels run on: the calling thread's current stream for the current device
/// (core/cuda/stream.h) — the legacy default stream unless a StreamGuard chose another.
inline cudaStream_t stream() {
  int device = 0;
  cudaGetDevice(&device);
  return current_stream(device);
}

/// sizes/strides of one operand, in elements, with up to kMaxDims dims.
struct StridedIndex {
  int ndim = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxDims];

  StridedIndex() = default;
  /// The offsets of `t`'s elements when walked in the order of `shape` (t's shape, or a shape t
  /// is broadcast to with stride 0). Size-1 dims are dropped and neighbours that are contiguous
  /// for this operand merged, so any rank works as long as at most kMaxDims runs remain (each
  /// operand splits the same linear index on its own, so operands may merge differently).
  StridedIndex(const Tensor& t, const Shape& shape) {
    const size_t off = shape.size() - t.shape().size();
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t size = shape[d];
      if (size == 1) continue;
      const bool present = d >= off && t.shape()[d - off] != 1;
      const int64_t stride = present ? t.strides()[d - off] : 0;
      if (ndim > 0 && strides[ndim - 1] == stride * size) {  // merges with the previous dim
        sizes[ndim - 1] *= size;
        strides[ndim - 1] = stride;
        continue;
      }
      TD_CHECK_INDEX(ndim < kMaxDims, "CUDA kernels take up to ", kMaxDims,
                     " non-mergeable dims, but shape ", shape, " with strides ", t.strides(),
                     " has more");
      sizes[ndim] = size;
      strides[ndim] = stride;
      ++ndim;
    }
  }
  __host__ __device__ int64_t offset(int64_t linear) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

#define TD_GRID_STRIDE_LOOP(i, n)                                           \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(blockDim.x) * gridDim.x)

}  // namespace tandem::cuda
