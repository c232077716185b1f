// core/kernels/cuda/embedding.cu — the table lookup and its scatter-add on CUDA, the CUDA side of
// cpu/embedding.cpp. An id out of range is found on the device and thrown from the host with the
// CPU's IndexError (bad_index.cuh); its row is not read.
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/bad_index.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

// out[i, c] = weight[ids[i], c], copied as W-byte words (a lookup does no arithmetic: any dtype).
template <typename W>
__global__ void embedding_forward_kernel(const W* weight, const int64_t* ids, W* out, int64_t n,
                                         int64_t d, int64_t rows, IndexFlag* bad) {
  TD_GRID_STRIDE_LOOP(idx, n * d) {
    const int64_t i = idx / d, c = idx - i * d, id = ids[i];
    if (id < 0 || id >= rows) {
      if (c == 0) atomicMin(bad, IndexFlag(i));
      out[idx] = W(0);
    } else {
      out[idx] = weight[id * d + c];
    }
  }
}

// dweight[v, c] += dy[i, c] for every position i with ids[i] = v ≠ padding_idx: a thread per
// column, the positions in order (no atomics: the same sums every run).
template <typename T>
__global__ void embedding_backward_kernel(const int64_t* ids, const T* dy, T* dweight, int64_t n,
                                          int64_t d, int64_t rows, int64_t padding_idx,
                                          IndexFlag* bad) {
  TD_GRID_STRIDE_LOOP(c, d) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      if (id < 0 || id >= rows) {
        if (c == 0) atomicMin(bad, IndexFlag(i));
        continue;
      }
      if (id != padding_idx) dweight[id * d + c] += dy[i * d + c];
    }
  }
}

// The CPU's IndexError for the first bad id, at the next sync point.
void check_ids(const BadIndex& bad, const Tensor& ids, int64_t rows) {
  bad.report_later(ids, [rows](int64_t at, int64_t value) {
    return str("embedding: id ", value, " at position ", at, " is out of range for a table of ",
               rows, " rows");
  });
}

}  // namespace

void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const int64_t n = ids.numel(), rows = weight.size(0), d = weight.size(1);
  if (n * d == 0) return;
  DeviceGuard guard(out.device());
  BadIndex bad(out.device());
  const auto launch = [&]<typename W>() {
    embedding_forward_kernel<W><<<blocks_for(n * d), kThreads, 0, stream()>>>(
        static_cast<const W*>(weight.data_ptr()), ids.data<int64_t>(),
        static_cast<W*>(out.data_ptr()), n, d, rows, bad.get());
  };
  switch (element_size(weight.dtype())) {
    case 2:
      launch.template operator()<uint16_t>();
      break;
    case 4:
      launch.template operator()<uint32_t>();
      break;
    default:
      launch.template operator()<uint64_t>();
      break;
  }
  TD_CUDA_CHECK_LAUNCH();
  check_ids(bad, ids, rows);
}

void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dweight, int64_t padding_idx) {
  const int64_t n = ids.numel(), rows = dweight.size(0), d = dweight.size(1);
  DeviceGuard guard(dweight.device());
  dispatch_float(dy.dtype(), "embedding_backward", [&]<typename T>() {
    TD_CUDA_CHECK(cudaMemsetAsync(dweight.data_ptr(), 0, dweight.nbytes(), stream()));
    if (n * d == 0) return;
    BadIndex bad(dweight.device());
    embedding_backward_kernel<T><<<blocks_for(d), kThreads, 0, stream()>>>(
        ids.data<int64_t>(), dy.data<T>(), dweight.data<T>(), n, d, rows, padding_idx, bad.get());
    TD_CUDA_CHECK_LAUNCH();
    check_ids(bad, ids, rows);
  });
}

}  // namespace tandem::cuda
