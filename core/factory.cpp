// core/factory.cpp — tensor factories. Every one allocates through Storage (so memory statistics
// see it) and fills through the device's kernel table (so the same code makes CUDA tensors).
#include <tandem/core/generator.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor.h>
#include <cmath>
#include <cstring>

namespace tandem {

Tensor empty(const Shape& shape, const TensorOptions& options) {
  for (int64_t s : shape) TD_CHECK_SHAPE(s >= 0, "empty: negative size ", s, " in shape ", shape);
  TD_CHECK_DTYPE(!options.requires_grad || is_floating(options.dtype),
                 "only floating-point tensors can require gradients, but dtype is ", options.dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(options.device, size_t(numel(shape)) * element_size(options.dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = options.dtype;
  impl->requires_grad = options.requires_grad;
  return Tensor(std::move(impl));
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  Tensor t = empty(shape, options);
  if (t.numel() > 0) kernels(t.device()).fill(t, value);
  return t;
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1.0, options); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.options()); }
Tensor scalar_tensor(double value, const TensorOptions& options) {
  return full({}, value, options);
}

Tensor arange(double end, const TensorOptions& options) { return arange(0, end, 1, options); }

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  TD_CHECK_VALUE(step != 0, "arange: step must be nonzero");
  TD_CHECK_VALUE((end - start) / step >= 0, "arange: the range [", start, ", ", end,
                 ") is empty or runs the wrong way for step ", step);
  const auto n = int64_t(std::ceil((end - start) / step));
  Tensor t = empty({n}, options);
  if (n > 0) kernels(t.device()).arange(t, start, step);
  return t;
}

Tensor rand(const Shape& shape, const TensorOptions& options) {
  Tensor t = empty(shape, options);
  TD_CHECK_DTYPE(is_floating(t.dtype()), "rand: expected a floating dtype, but got ", t.dtype());
  if (t.numel() == 0) return t;
  const GeneratorState state = reserve_random(t.device(), uint64_t(t.numel()));
  kernels(t.device()).uniform(t, 0.0, 1.0, state);
  return t;
}

Tensor randn(const Shape& shape, const TensorOptions& options) {
  Tensor t = empty(shape, options);
  TD_CHECK_DTYPE(is_floating(t.dtype()), "randn: expected a floating dtype, but got ", t.dtype());
  if (t.numel() == 0) return t;
  const GeneratorState state = reserve_random(t.device(), uint64_t(t.numel()));
  kernels(t.device()).normal(t, 0.0, 1.0, state);
  return t;
}

Tensor rand_like(const Tensor& t) { return rand(t.shape(), t.options()); }
Tensor randn_like(const Tensor& t) { return randn(t.shape(), t.options()); }

namespace {
// Builds a CPU tensor from doubles, converts it to the requested dtype and device.
Tensor from_doubles(const std::vector<double>& values, const Shape& shape,
                    const TensorOptions& options) {
  Tensor host = from_vector(values, shape);
  Tensor out = detail::convert(host, options.device, options.dtype);
  out.impl().requires_grad = false;
  if (options.requires_grad) {
    TD_CHECK_DTYPE(is_floating(options.dtype),
                   "only floating-point tensors can require gradients, but dtype is ",
                   options.dtype);
    out.impl().requires_grad = true;
  }
  return out;
}
}  // namespace

Tensor tensor(std::initializer_list<double> values, const TensorOptions& options) {
  return from_doubles(std::vector<double>(values), {int64_t(values.size())}, options);
}

Tensor tensor(std::initializer_list<std::initializer_list<double>> rows,
              const TensorOptions& options) {
  const int64_t cols = rows.size() == 0 ? 0 : int64_t(rows.begin()->size());
  std::vector<double> values;
  int64_t r = 0;
  for (const auto& row : rows) {
    TD_CHECK_SHAPE(int64_t(row.size()) == cols, "tensor: row ", r, " has ", row.size(),
                   " values but row 0 has ", cols, "; every row needs the same length");
    values.insert(values.end(), row.begin(), row.end());
    ++r;
  }
  return from_doubles(values, {int64_t(rows.size()), cols}, options);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  TD_CHECK_SHAPE(int64_t(values.size()) == numel(shape), "from_vector: ", values.size(),
                 " values do not fill shape ", shape, " (", numel(shape), " elements)");
  Tensor host = empty(shape, {.dtype = dtype_of<T>()});
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return device == Device::cpu() ? host : detail::convert(host, device, host.dtype());
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);

template <>
Tensor from_vector<bool>(const std::vector<bool>& values, const Shape& shape, Device device) {
  std::vector<int64_t> v(values.begin(), values.end());
  return detail::convert(from_vector(v, shape), device, DType::b8);
}

}  // namespace tandem
