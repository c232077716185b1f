// core/kernels/cpu/strided.h — the loop every elementwise CPU kernel shares. It coalesces the
// operands' dims (so contiguous tensors become one long run), then hands 1-D runs of the
// innermost dim to a callback, in parallel over the outer rows. The callback gets each operand's
// start offset and inner stride; stride 1 (contiguous) and 0 (broadcast) are the fast cases.
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/core/thread_pool.h>
#include <array>

namespace tandem::cpu {

inline constexpr int64_t kGrain = 32768;  // elements per task: below this, threads cost more

template <size_t N>
struct Runs {
  Shape shape;                     // coalesced sizes; the last one is the run length
  std::array<Strides, N> strides;  // per operand, in elements
};

/// Drops size-1 dims and merges neighbours that are contiguous for every operand.
template <size_t N>
Runs<N> coalesce(const Shape& shape, const std::array<const Strides*, N>& strides) {
  Runs<N> r;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const bool merge = !r.shape.empty() && [&] {
      for (size_t k = 0; k < N; ++k)
        if (r.strides[k].back() != (*strides[k])[d] * shape[d]) return false;
      return true;
    }();
    if (merge) {
      r.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) r.strides[k].back() = (*strides[k])[d];
    } else {
      r.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) r.strides[k].push_back((*strides[k])[d]);
    }
  }
  if (r.shape.empty()) {  // a scalar, or all dims of size 1
    r.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) r.strides[k].push_back(0);
  }
  return r;
}

/// fn(offsets, n, inner_strides) for every run of the innermost dim. Long runs are cut into
/// pieces of kGrain elements so that one big contiguous tensor still uses every thread.
template <size_t N, typename F>
void for_each_run(const Shape& shape, const std::array<const Strides*, N>& strides, F&& fn) {
  const Runs<N> r = coalesce(shape, strides);
  const size_t nd = r.shape.size();
  const int64_t inner = r.shape.back();
  if (inner == 0) return;
  const int64_t rows = numel(r.shape) / inner;
  const int64_t pieces = (inner + kGrain - 1) / kGrain;  // per row
  const int64_t piece_len = (inner + pieces - 1) / pieces;
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = r.strides[k].back();
  const int64_t grain = std::max<int64_t>(1, kGrain / piece_len);
  detail::parallel_for(0, rows * pieces, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t row = task / pieces, start = (task % pieces) * piece_len;
      std::array<int64_t, N> off{};
      int64_t rest = row;
      for (size_t d = nd - 1; d-- > 0;) {  // row index -> outer coordinates
        const int64_t i = rest % r.shape[d];
        rest /= r.shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * r.strides[k][d];
      }
      for (size_t k = 0; k < N; ++k) off[k] += start * inner_strides[k];
      fn(off, std::min(piece_len, inner - start), inner_strides);
    }
  });
}

/// fn(c0, n) for the blocks of up to 64 columns [c0, c0 + n) of a sum over `rows` rows of a
/// [rows, cols] array, the blocks in parallel. fn sums its rows in order, so the result does not
/// depend on the threads (layer norm's dw, embedding's scatter-add).
template <typename F>
void for_column_blocks(int64_t rows, int64_t cols, F&& fn) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(rows * kBlock, 1));
  detail::parallel_for(0, blocks, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) fn(b * kBlock, std::min(kBlock, cols - b * kBlock));
  });
}

}  // namespace tandem::cpu
