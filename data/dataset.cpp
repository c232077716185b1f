// data/dataset.cpp — the default get_batch: stack get(i) for each index into one contiguous
// tensor per field. Examples must agree in shape, dtype and device; the first example fixes them.
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/data/dataset.h>
#include <cstring>

namespace tandem::data {

Dataset::~Dataset() = default;

namespace detail {

void check_index(const char* who, int64_t index, int64_t size) {
  TD_CHECK_INDEX(index >= 0 && index < size, who, ": index ", index,
                 " is out of range for a dataset of size ", size);
}

}  // namespace detail

namespace {

// Copies `part` (shape `row_shape`) into row `b` of `out`. Host tensors are one memcpy of a
// contiguous row; other devices go through copy_, which crosses devices and layouts.
void put_row(const Tensor& out, int64_t b, const Tensor& part) {
  const int64_t row = numel(part.shape());
  if (out.device().is_cpu() && part.device().is_cpu()) {
    const Tensor src = tandem::detail::contiguous(part);
    const size_t bytes = size_t(row) * element_size(out.dtype());
    if (bytes > 0)
      std::memcpy(static_cast<char*>(out.data_ptr()) + size_t(b) * bytes, src.data_ptr(), bytes);
    return;
  }
  Tensor dst = tandem::detail::as_strided(out, part.shape(), contiguous_strides(part.shape()),
                                          out.storage_offset() + b * row);
  dst.copy_(part);
}

// Stacks field `what` ("x" or "y") of `examples`; undefined when every example leaves it out.
Tensor stack(const char* what, const std::vector<Example>& examples,
             const std::vector<int64_t>& indices, Tensor Example::*field) {
  const Tensor& first = examples.front().*field;
  for (size_t b = 0; b < examples.size(); ++b) {
    const Tensor& t = examples[b].*field;
    TD_CHECK_VALUE(t.defined() == first.defined(), "get_batch: example ", indices[b],
                   (t.defined() ? " has " : " has no "), what, " but example ", indices[0],
                   (first.defined() ? " has one" : " has none"));
    if (!t.defined()) continue;
    TD_CHECK_SHAPE(t.shape() == first.shape(), "get_batch: cannot stack ", what, " of example ",
                   indices[b], " (", describe(t), ") with example ", indices[0], " (",
                   describe(first), "); every example's ", what, " needs the same shape");
    TD_CHECK_DTYPE(t.dtype() == first.dtype(), "get_batch: ", what, " of example ", indices[b],
                   " is ", describe(t), " but example ", indices[0], " is ", describe(first));
    TD_CHECK_DEVICE(t.device() == first.device(), "get_batch: ", what, " of example ", indices[b],
                    " is ", describe(t), " but example ", indices[0], " is ", describe(first));
  }
  if (!first.defined()) return Tensor();
  Shape shape{int64_t(examples.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  Tensor out = empty(shape, {.dtype = first.dtype(), .device = first.device()});
  for (size_t b = 0; b < examples.size(); ++b) put_row(out, int64_t(b), examples[b].*field);
  return out;
}

}  // namespace

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  TD_CHECK_VALUE(!indices.empty(), "get_batch: expected at least one index, but got none");
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return {stack("x", examples, indices, &Example::x), stack("y", examples, indices, &Example::y)};
}

}  // namespace tandem::data
