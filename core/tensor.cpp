// core/tensor.cpp — Tensor metadata and host access. Reading elements of a CUDA tensor goes
// through a copy to the host (kernels(device).copy), never through a device pointer.
#include <tandem/core/kernels/dispatch_dtype.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor.h>
#include <cstring>

namespace tandem {

int64_t Tensor::size(int64_t dim) const {
  return impl().shape[size_t(wrap_dim(dim, this->dim(), "size"))];
}

int64_t Tensor::stride(int64_t dim) const {
  return impl().strides[size_t(wrap_dim(dim, this->dim(), "stride"))];
}

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  if (tandem::numel(t.shape) == 0)
    return true;  // no elements: any layout is contiguous (as PyTorch)
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = impl();
  TD_CHECK_DEVICE(!t.storage->device().is_meta(), "data_ptr: a ", t.shape, " tensor on ",
                  t.storage->device(), " has no memory (meta tensors have shapes and dtypes only)");
  return static_cast<char*>(t.storage->data()) + t.offset * int64_t(element_size(t.dtype));
}

const void* Tensor::address() const {
  const TensorImpl& t = impl();
  return static_cast<const char*>(t.storage->data()) + t.offset * int64_t(element_size(t.dtype));
}

double Tensor::item() const {
  TD_CHECK_SHAPE(numel() == 1, "item: expected a tensor with one element, but got shape ", shape(),
                 " (", numel(), " elements)");
  return to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  // Bring the elements to the host in row-major order and T's dtype, with one copy kernel.
  Tensor host = detail::convert(*this, Device::cpu(), dtype_of<T>());
  std::vector<T> out(size_t(host.numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

// std::vector<bool> is bit-packed, so bools come back as one byte per element via int64.
template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  std::vector<int64_t> v = to_vector<int64_t>();
  return std::vector<bool>(v.begin(), v.end());
}

}  // namespace tandem
