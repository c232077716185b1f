// data/tensor_dataset.cpp — TensorDataset. The tensors are made contiguous once, here, so every
// later row access is a pointer offset and every batch a row gather (data/gather.h).
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/data/gather.h>
#include <tandem/data/tensor_dataset.h>

namespace tandem::data {

TensorDataset::TensorDataset(Tensor x, Tensor y) {
  check_defined("TensorDataset", "x", x);
  TD_CHECK_SHAPE(x.dim() >= 1, "TensorDataset: x ", describe(x),
                 " has no dim 0 to index examples along; expected x [N, ...]");
  if (y.defined()) {
    TD_CHECK_SHAPE(y.dim() >= 1, "TensorDataset: y ", describe(y),
                   " has no dim 0 to index examples along; expected y [N, ...]");
    TD_CHECK_SHAPE(x.size(0) == y.size(0), "TensorDataset: x ", x.shape(), " and y ", y.shape(),
                   " differ in size along dim 0 (", x.size(0), " vs ", y.size(0),
                   "); each row of x needs one row of y");
  }
  // detail::contiguous never records, so the dataset holds plain data even if x requires grad.
  x_ = tandem::detail::contiguous(x.detach());
  if (y.defined()) y_ = tandem::detail::contiguous(y.detach());
  size_ = x_.size(0);
}

Example TensorDataset::get(int64_t index) const {
  return {detail::row_view("TensorDataset::get", x_, index),
          y_.defined() ? detail::row_view("TensorDataset::get", y_, index) : Tensor()};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  TD_CHECK_VALUE(!indices.empty(), "TensorDataset::get_batch: expected at least one index");
  return {detail::gather_rows("TensorDataset::get_batch", x_, indices),
          y_.defined() ? detail::gather_rows("TensorDataset::get_batch", y_, indices) : Tensor()};
}

}  // namespace tandem::data
