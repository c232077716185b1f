// core/tensor.h — the Tensor: a cheap handle to shape, strides, offset, dtype, device and a shared
// Storage. Views (reshape, transpose, narrow, expand, ...) share storage; contiguous() copies only
// when needed. Metadata and data access are defined in core/; the differentiable methods further
// down are defined in autograd/ (core knows autograd only through the opaque AutogradMeta), so a
// program links Tandem::tandem, as PyTorch's Tensor methods live in ATen and autograd.
#pragma once

#include <tandem/core/check.h>
#include <tandem/core/device.h>
#include <tandem/core/dtype.h>
#include <tandem/core/hook_handle.h>
#include <tandem/core/shape.h>
#include <tandem/core/storage.h>
#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

struct AutogradMeta;  // autograd/autograd_meta.h: grad, grad_fn, hooks

/// dtype, device and requires_grad for factories: zeros({2, 3}, {.dtype = kFloat64}).
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device();
  bool requires_grad = false;
};

/// The shared state behind Tensor handles.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements, from storage->data()
  DType dtype = DType::f32;
  bool requires_grad = false;  // a leaf that wants .grad, or the output of a recorded op
  // Autograd state, null for tensors autograd never touched. Two threads may reach it first at
  // the same time (two forwards sharing parameters), so autograd_meta() (autograd/record.cpp)
  // creates it under a lock: `autograd` owns it, and `autograd_ptr` publishes it to readers,
  // which need no lock.
  std::shared_ptr<AutogradMeta> autograd;
  std::atomic<AutogradMeta*> autograd_ptr{nullptr};
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (core/tensor.cpp) ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Shape& sizes() const { return impl().shape; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t dim() const { return int64_t(impl().shape.size()); }
  int64_t numel() const { return tandem::numel(impl().shape); }
  const Strides& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t storage_offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return {dtype(), device(), false}; }
  bool is_contiguous() const;
  size_t nbytes() const { return size_t(numel()) * element_size(dtype()); }

  /// Address of the first element (device memory for CUDA tensors). DeviceError on meta.
  void* data_ptr() const;
  /// Where the first element lies, to compare tensors' places (the same memory? overlapping?),
  /// never to read through: on the meta device a distinct place with no memory behind it.
  const void* address() const;
  /// Typed address of the first element; DTypeError when T does not match dtype().
  template <typename T>
  T* data() const {
    TD_CHECK_DTYPE(dtype_of<T>() == dtype(), "data<", name(dtype_of<T>()), ">: tensor has dtype ",
                   dtype());
    return static_cast<T*>(data_ptr());
  }
  /// The value of a one-element tensor (copied to the host if needed).
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  /// All elements in row-major order, copied to the host, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  TensorImpl& impl() const {
    TD_CHECK(impl_ != nullptr, "this tensor is undefined (default-constructed, or a missing grad)");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  /// The storage's version counter (shared by all views).
  uint64_t version() const { return impl().storage->version(); }
  /// PyTorch-style text: tensor([[1., 2.]], device='cpu:1').
  std::string str() const;

  // ---- differentiable views (autograd/ops/shape.cpp); each shares storage ----
  Tensor view(const Shape& shape) const;     // requires compatible strides; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor squeeze() const;                           // removes every size-1 dim
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;  // size-1 dims become stride-0 broadcasts

  // ---- copies and conversions (autograd/ops/copy.cpp) ----
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;  // differentiable: gradients flow back to the source device
  /// With non_blocking, a copy from pinned host memory to a GPU returns before the bytes have
  /// moved (see cuda::NonBlockingCopies); otherwise the same as to(device).
  Tensor to(Device device, bool non_blocking) const;
  Tensor to(DType dtype) const;
  /// A tensor sharing this one's storage (and version counter) with no autograd history.
  Tensor detach() const;

  // ---- math (autograd/ops/*.cpp); operators + - * / are free functions in autograd/ops/ops.h ----
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor gelu() const;
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  Tensor min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;  // index into the flattened tensor, int64
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor eq(const Tensor& other) const;  // comparisons give bool tensors and no gradient
  Tensor ne(const Tensor& other) const;
  Tensor lt(const Tensor& other) const;
  Tensor le(const Tensor& other) const;
  Tensor gt(const Tensor& other) const;
  Tensor ge(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(double other) const;
  Tensor lt(double other) const;
  Tensor le(double other) const;
  Tensor gt(double other) const;
  Tensor ge(double other) const;

  // ---- in-place updates for optimizers (autograd/ops/inplace.cpp) ----
  // Not recorded by autograd: they refuse tensors that require grad while grad mode is on
  // (run optimizers under NoGradGuard). Each bumps the version counter.
  Tensor& add_(const Tensor& other, double alpha = 1.0);  // self += alpha * other
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(double value);
  Tensor& addcmul_(const Tensor& t1, const Tensor& t2, double value = 1.0);  // += value·t1·t2
  Tensor& addcdiv_(const Tensor& t1, const Tensor& t2, double value = 1.0);  // += value·t1/t2
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype; crosses devices

  // ---- autograd (autograd/tensor_autograd.cpp) ----
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf tensor as a parameter-like tensor whose gradient is accumulated in grad().
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;  // not produced by a recorded op
  /// The accumulated gradient of a leaf (undefined before the first backward).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // set_grad(Tensor()) clears it
  /// Name of the op that produced this tensor ("relu", "matmul"), or "" for leaves.
  std::string grad_fn_name() const;
  /// Back-propagates from this tensor. `grad` defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  /// fn(grad) runs when this tensor's gradient is computed; a defined result replaces the gradient.
  HookHandle register_hook(std::function<Tensor(const Tensor&)> fn) const;
  /// fn(tensor) runs after this leaf's .grad was accumulated (DDP's bucketing hangs on this).
  HookHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  /// Keeps grad() for a non-leaf tensor after backward.
  void retain_grad() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories (core/factory.cpp) ----
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor scalar_tensor(double value, const TensorOptions& options = {});  // shape []
/// [0, end) and [start, end) by step; int64 unless options say otherwise.
Tensor arange(double end, const TensorOptions& options = {.dtype = DType::i64});
Tensor arange(double start, double end, double step = 1,
              const TensorOptions& options = {.dtype = DType::i64});
/// Uniform in [0, 1) and standard normal, from the device's generator (core/generator.h).
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
/// tensor({1, 2, 3}) and tensor({{1, 2}, {3, 4}}); float32 unless options say otherwise.
Tensor tensor(std::initializer_list<double> values, const TensorOptions& options = {});
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows,
              const TensorOptions& options = {});
/// A tensor of `shape` holding a copy of `values` (row-major), with T's dtype.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device());
template <>
Tensor from_vector<bool>(const std::vector<bool>& values, const Shape& shape, Device device);
template <>
std::vector<bool> Tensor::to_vector<bool>() const;

}  // namespace tandem
