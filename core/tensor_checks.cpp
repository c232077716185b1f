// core/tensor_checks.cpp — the shared op checks and their messages.
#include <tandem/core/tensor_checks.h>

namespace tandem {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return str(t.shape(), " ", t.dtype(), " on ", t.device());
}

void check_defined(const char* op, std::string_view what, const Tensor& t) {
  TD_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

void check_same_device(const char* op, std::initializer_list<NamedTensor> tensors) {
  const NamedTensor* first = nullptr;
  for (const NamedTensor& nt : tensors) {
    if (!nt.tensor.defined()) continue;
    if (first == nullptr) {
      first = &nt;
      continue;
    }
    const Device a = first->tensor.device(), b = nt.tensor.device();
    TD_CHECK_DEVICE(a == b, op, ": expected all tensors on the same device, but ", first->name,
                    " is on ", a, " and ", nt.name, " is on ", b, " (", first->name, " ",
                    first->tensor.shape(), ", ", nt.name, " ", nt.tensor.shape(), ")",
                    "\n  hint: call model.to(device) before the first forward, and move each "
                    "batch with x.to(device)");
  }
}

void check_same_dtype(const char* op, std::initializer_list<NamedTensor> tensors) {
  const NamedTensor* first = nullptr;
  for (const NamedTensor& nt : tensors) {
    if (!nt.tensor.defined()) continue;
    if (first == nullptr) {
      first = &nt;
      continue;
    }
    TD_CHECK_DTYPE(first->tensor.dtype() == nt.tensor.dtype(), op,
                   ": expected tensors of one dtype, but ", first->name, " is ",
                   describe(first->tensor), " and ", nt.name, " is ", describe(nt.tensor),
                   "\n  hint: convert one of them with .to(", first->tensor.dtype(), ")");
  }
}

void check_floating(const char* op, std::string_view what, const Tensor& t) {
  TD_CHECK_DTYPE(is_floating(t.dtype()), op, ": expected ", what,
                 " to be float32 or float64, but it is ", describe(t));
}

void check_dtype(const char* op, std::string_view what, const Tensor& t, DType dtype) {
  TD_CHECK_DTYPE(t.dtype() == dtype, op, ": expected ", what, " to have dtype ", dtype,
                 ", but it is ", describe(t));
}

void check_dim(const char* op, std::string_view what, const Tensor& t, int64_t dims,
               std::string_view layout) {
  TD_CHECK_SHAPE(t.dim() == dims, op, ": expected ", what, " with ", dims, " dimensions ", layout,
                 ", but got shape ", t.shape());
}

}  // namespace tandem
