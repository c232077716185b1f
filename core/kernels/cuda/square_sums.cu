// core/kernels/cuda/square_sums.cu — Σ x² in float64 for many tensors: consecutive tensors of one
// dtype go in batches of up to 48 (square_sums.cuh's kernels: partial sums per chunk, then one
// block per tensor), two launches per batch, nothing read on the host.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <algorithm>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <tandem/core/kernels/cuda/square_sums.cuh>

namespace tandem::cuda {

void square_sums(std::span<const Tensor> xs, Tensor& out) {
  using namespace squares;
  DeviceGuard guard(out.device());
  double* o = out.data<double>();
  size_t i = 0;
  while (i < xs.size()) {
    dispatch<FloatTypesWith16Bit>(xs[i].dtype(), "square_sums", [&]<typename T>() {
      Batch<T> b{};
      const size_t start = i;
      int64_t blocks = 0;
      for (; i < xs.size() && b.count < kSlots && xs[i].dtype() == dtype_of<T>(); ++i, ++b.count) {
        b.x[b.count] = xs[i].data<T>();
        b.numel[b.count] = xs[i].numel();
        b.first_block[b.count] = blocks;
        blocks += (xs[i].numel() + kChunk - 1) / kChunk;
      }
      b.first_block[b.count] = blocks;
      // Freed at the end of the scope, reused only after these kernels (the allocator is
      // stream-ordered).
      const Tensor partial =
          empty({std::max<int64_t>(blocks, 1)}, {.dtype = kFloat64, .device = out.device()});
      if (blocks > 0)
        square_sum_chunks_kernel<T>
            <<<unsigned(blocks), kBlockThreads, 0, stream()>>>(b, partial.data<double>());
      square_sum_totals_kernel<T>
          <<<unsigned(b.count), kBlockThreads, 0, stream()>>>(b, partial.data<double>(), o + start);
      TD_CUDA_CHECK_LAUNCH();
    });
  }
}

}  // namespace tandem::cuda
