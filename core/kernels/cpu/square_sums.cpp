// core/kernels/cpu/square_sums.cpp — Σ x² in float64 for each of many tensors in one pass:
// clip_grad_norm_'s reading of a model's gradients. Before it, each gradient went through a float64
// copy, a product and a sum (three kernels and 24 bytes written and read per element of float32
// gradient); here each element is read once, as it is, and widened in a register.
//
// The order of every sum is fixed by the sizes alone: each tensor is cut into chunks of kChunk
// elements, a chunk is summed in 8 lanes (element i into lane i % 8) folded by a fixed tree, and a
// tensor's chunks are added in order. Threads take whole chunks, so the result has the same bits
// on every run and at every thread count.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/runs.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <vector>

namespace tandem::cpu {
namespace {

constexpr int64_t kChunk = int64_t(1) << 15;  // elements per partial sum (128 KiB of float32)

template <typename T>
double chunk_square_sum(const T* x, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double v = double(compute_t<T>(x[i + l]));
      lane[l] += v * v;
    }
  for (int l = 0; i < n; ++i, ++l) {
    const double v = double(compute_t<T>(x[i]));
    lane[l] += v * v;
  }
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

}  // namespace

void square_sums(std::span<const Tensor> xs, Tensor& out) {
  // Chunk c belongs to the tensor t with first[t] <= c < first[t + 1].
  std::vector<int64_t> first(xs.size() + 1, 0);
  for (size_t t = 0; t < xs.size(); ++t)
    first[t + 1] = first[t] + (xs[t].numel() + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(first.back()));
  detail::parallel_for(0, first.back(), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const size_t t = size_t(std::upper_bound(first.begin(), first.end(), c) - first.begin()) - 1;
      const Tensor& x = xs[t];
      const int64_t start = (c - first[t]) * kChunk, n = std::min(kChunk, x.numel() - start);
      dispatch<FloatTypesWith16Bit>(x.dtype(), "square_sums", [&]<typename T>() {
        partial[size_t(c)] = chunk_square_sum(x.data<T>() + start, n);
      });
    }
  });
  double* o = out.data<double>();
  for (size_t t = 0; t < xs.size(); ++t) {
    double s = 0;
    for (int64_t c = first[t]; c < first[t + 1]; ++c) s += partial[size_t(c)];
    o[t] = s;
  }
}

}  // namespace tandem::cpu
