// core/kernels/cpu/embedding.cpp — a table lookup and its scatter-add. Every id is checked before
// a row is read: an id out of range is an IndexError naming it, its position and the table's size,
// never a read outside the table.
#include <tandem/core/check.h>
#include <tandem/core/kernels/cpu/eigen.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/strided.h>
#include <tandem/core/kernels/dispatch_dtype.h>
#include <cstring>

namespace tandem::cpu {
namespace {

void check_ids(const int64_t* ids, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    TD_CHECK_INDEX(ids[i] >= 0 && ids[i] < rows, "embedding: id ", ids[i], " at position ", i,
                   " is out of range for a table of ", rows, " rows");
}

}  // namespace

// out[i] = weight[ids[i]]: rows copied as they are, in any dtype (a lookup does no arithmetic).
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const int64_t n = ids.numel(), rows = weight.size(0), d = weight.size(1);
  const int64_t* pi = ids.data<int64_t>();
  check_ids(pi, n, rows);
  const size_t row_bytes = size_t(d) * element_size(weight.dtype());
  const auto* src = static_cast<const char*>(weight.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  detail::parallel_for(
      0, n, std::max<int64_t>(1, kGrain / std::max<int64_t>(d, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          std::memcpy(dst + size_t(i) * row_bytes, src + size_t(pi[i]) * row_bytes, row_bytes);
      });
}

// dweight[v] = Σ_{i: ids[i] = v} dy[i], v ≠ padding_idx. Columns in parallel blocks; within a
// block, the positions in order, so the sums do not depend on the threads.
void embedding_backward(const Tensor& ids, const Tensor& dy, Tensor& dweight, int64_t padding_idx) {
  dispatch_float(dy.dtype(), "embedding_backward", [&]<typename T>() {
    const int64_t n = ids.numel(), rows = dweight.size(0), d = dweight.size(1);
    const int64_t* pi = ids.data<int64_t>();
    check_ids(pi, n, rows);
    const T* pg = dy.data<T>();
    T* pw = dweight.data<T>();
    std::fill_n(pw, dweight.numel(), T(0));
    for_column_blocks(n, d, [&](int64_t c0, int64_t w) {
      for (int64_t i = 0; i < n; ++i)
        if (pi[i] != padding_idx)
          ArrayMap<T>(pw + pi[i] * d + c0, w) += ConstArrayMap<T>(pg + i * d + c0, w);
    });
  });
}

}  // namespace tandem::cpu
