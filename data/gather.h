// data/gather.h — the fast path of get_batch for datasets held in one tensor (TensorDataset,
// MNIST): copy the selected rows of a contiguous [N, ...] tensor into a new contiguous
// [B, ...] tensor, one memcpy per row on the host. It never records autograd history.
#pragma once

#include <tandem/core/tensor.h>
#include <cstdint>
#include <vector>

namespace tandem::data::detail {

/// Rows `indices` of `src` (contiguous, at least 1-D) as a new contiguous tensor
/// [indices.size(), ...src.shape[1:]] on src's device. IndexError naming `who`, the index and
/// src.size(0) for an index out of range.
Tensor gather_rows(const char* who, const Tensor& src, const std::vector<int64_t>& indices);

/// Row `index` of `src` as a view [...src.shape[1:]] sharing src's storage, without autograd
/// history (IndexError as for gather_rows).
Tensor row_view(const char* who, const Tensor& src, int64_t index);

}  // namespace tandem::data::detail
