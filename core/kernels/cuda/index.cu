// core/kernels/cuda/index.cu — gather, scatter-add, top-k and multinomial sampling on CUDA, the
// CUDA side of cpu/index.cpp: a thread per element for gather, a thread per row for the others
// (a row's sums and draws in order: the CPU's results, bit for bit where no libm is involved). Bad
// indices and bad rows are found on the device and thrown from the host (bad_index.cuh).
#include <tandem/core/cuda_device.h>
#include <tandem/core/generator.h>
#include <tandem/core/kernels/cuda/kernels_cuda.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/kernels/cuda/bad_index.cuh>
#include <tandem/core/kernels/cuda/launch.cuh>

namespace tandem::cuda {
namespace {

template <typename T>
__global__ void gather_kernel(const T* x, const int64_t* index, T* out, int64_t count, int64_t n,
                              int64_t k, IndexFlag* bad) {
  TD_GRID_STRIDE_LOOP(i, count) {
    const int64_t r = i / k, at = index[i];
    if (at < 0 || at >= n) {
      atomicMin(bad, IndexFlag(i));
      out[i] = T(0);
    } else {
      out[i] = x[r * n + at];
    }
  }
}

template <typename T>
__global__ void scatter_add_kernel(const int64_t* index, const T* src, T* out, int64_t m, int64_t n,
                                   int64_t k, IndexFlag* bad) {
  TD_GRID_STRIDE_LOOP(r, m) {
    for (int64_t j = 0; j < n; ++j) out[r * n + j] = T(0);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = index[r * k + j];
      if (at < 0 || at >= n)
        atomicMin(bad, IndexFlag(r * k + j));
      else
        out[r * n + at] += src[r * k + j];
    }
  }
}

// k passes over the row, each taking the best not yet taken (NaN first, ties to the lower index).
template <typename T>
__global__ void topk_kernel(const T* x, T* values, int64_t* indices, int64_t m, int64_t n,
                            int64_t k, bool largest) {
  TD_GRID_STRIDE_LOOP(r, m) {
    const T* row = x + r * n;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t c = 0; c < n; ++c) {
        bool taken = false;
        for (int64_t t = 0; t < j && !taken; ++t) taken = indices[r * k + t] == c;
        if (taken) continue;
        if (best < 0) {
          best = c;
          continue;
        }
        const T v = row[c], b = row[best];
        const bool vn = v != v, bn = b != b;
        if (bn) continue;
        if (vn || (largest ? v > b : v < b)) best = c;
      }
      indices[r * k + j] = best;
      values[r * k + j] = row[best];
    }
  }
}

// A row per thread: the checks of the CPU (flagging the row), then the draws.
template <typename T>
__global__ void multinomial_kernel(const T* probs, T* work, int64_t* out, int64_t m, int64_t n,
                                   int64_t samples, bool replacement, uint64_t seed,
                                   uint64_t offset, IndexFlag* bad) {
  TD_GRID_STRIDE_LOOP(r, m) {
    T* w = work + r * n;
    T total = T(0);
    int64_t positive = 0;
    bool ok = true;
    for (int64_t j = 0; j < n; ++j) {
      const T v = probs[r * n + j];
      ok = ok && v >= T(0) && !isinf(v);
      w[j] = v;
      total += v;
      positive += v > T(0);
    }
    if (!ok || !(total > T(0)) || (!replacement && samples > positive)) {
      atomicMin(bad, IndexFlag(r));
      continue;
    }
    for (int64_t s = 0; s < samples; ++s) {
      T sum = T(0);
      for (int64_t j = 0; j < n; ++j) sum += w[j];
      const T u = philox_unit<T>(philox(offset + uint64_t(r * samples + s), seed), 0) * sum;
      int64_t pick = n - 1;
      T run = T(0);
      for (int64_t j = 0; j < n; ++j) {
        run += w[j];
        if (u < run && w[j] > T(0)) {
          pick = j;
          break;
        }
      }
      while (w[pick] == T(0) && pick > 0) --pick;
      out[r * samples + s] = pick;
      if (!replacement) w[pick] = T(0);
    }
  }
}

// The CPU's IndexError for the first bad index, at the next sync point.
void check_index(const BadIndex& bad, const Tensor& index, int64_t n, const char* op) {
  bad.report_later(index, [n, op](int64_t at, int64_t value) {
    return str(op, ": index ", value, " at position ", at, " is out of range for a dim of size ",
               n);
  });
}

}  // namespace

void gather(const Tensor& x, const Tensor& index, Tensor& out) {
  const int64_t n = x.size(-1), k = index.size(-1), count = index.numel();
  if (count == 0) return;
  DeviceGuard guard(out.device());
  BadIndex bad(out.device());
  dispatch_numeric(x.dtype(), "gather", [&]<typename T>() {
    gather_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(
        x.data<T>(), index.data<int64_t>(), out.data<T>(), count, n, k, bad.get());
    TD_CUDA_CHECK_LAUNCH();
  });
  check_index(bad, index, n, "gather");
}

void scatter_add(const Tensor& index, const Tensor& src, Tensor& out) {
  const int64_t n = out.size(-1), k = index.size(-1), m = n ? out.numel() / n : 0;
  if (m == 0) return;
  DeviceGuard guard(out.device());
  BadIndex bad(out.device());
  dispatch_numeric(src.dtype(), "scatter_add", [&]<typename T>() {
    scatter_add_kernel<T><<<blocks_for(m), kThreads, 0, stream()>>>(
        index.data<int64_t>(), src.data<T>(), out.data<T>(), m, n, k, bad.get());
    TD_CUDA_CHECK_LAUNCH();
  });
  check_index(bad, index, n, "scatter_add");
}

void topk(const Tensor& x, int64_t k, bool largest, Tensor& values, Tensor& indices) {
  const int64_t n = x.size(-1), m = n ? x.numel() / n : 0;
  if (m * k == 0) return;
  DeviceGuard guard(values.device());
  dispatch_numeric(x.dtype(), "topk", [&]<typename T>() {
    topk_kernel<T><<<blocks_for(m), kThreads, 0, stream()>>>(
        x.data<T>(), values.data<T>(), indices.data<int64_t>(), m, n, k, largest);
    TD_CUDA_CHECK_LAUNCH();
  });
}

void multinomial(const Tensor& probs, int64_t samples, bool replacement, GeneratorState rng,
                 Tensor& out) {
  const int64_t n = probs.size(-1), m = n ? probs.numel() / n : 0;
  if (m == 0) return;
  DeviceGuard guard(out.device());
  BadIndex bad(out.device());
  dispatch_float(probs.dtype(), "multinomial", [&]<typename T>() {
    Tensor work = empty(probs.shape(), probs.options());
    multinomial_kernel<T><<<blocks_for(m), kThreads, 0, stream()>>>(
        probs.data<T>(), work.data<T>(), out.data<int64_t>(), m, n, samples, replacement, rng.seed,
        rng.offset, bad.get());
    TD_CUDA_CHECK_LAUNCH();
  });
  // The flag holds a row here; read back for the message as the CPU words it.
  const auto first = bad.first(out);
  TD_CHECK_VALUE(!first, "multinomial: row ", first ? first->first : 0,
                 " is not a distribution (a negative, NaN or inf entry, a sum of 0, or fewer "
                 "nonzero categories than samples without replacement)");
}

}  // namespace tandem::cuda
