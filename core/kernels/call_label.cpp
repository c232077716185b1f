// core/kernels/call_label.cpp — a kernel call's label, bytes and flops (call_label.h).
#include <tandem/core/kernels/call_label.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tandem::kernel_calls {

double span_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t extent = 1;
  for (size_t d = 0; d < t.shape().size(); ++d)
    extent += (t.shape()[d] - 1) * std::abs(t.strides()[d]);
  return double(std::min(extent, t.numel())) * double(element_size(t.dtype()));
}

std::string shape_text(const Tensor& t) {
  std::string out;
  auto list = [&out](const Shape& v) {
    out.push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out.push_back(',');
      out.append(std::to_string(v[i]));
    }
    out.push_back(']');
  };
  list(t.shape());
  if (!t.is_contiguous()) {
    out.push_back('/');
    list(t.strides());
  }
  return out;
}

double gemm_flops(const Label& l, const char* name_of_entry) {
  if (std::strcmp(name_of_entry, "gemm") != 0 || l.tensors[2] == nullptr) return 0;
  const Tensor &a = *l.tensors[0], &c = *l.tensors[2];
  return 2.0 * double(c.numel()) * double(l.first_bool ? a.size(-2) : a.size(-1));
}

void add_dtypes(Label& l, const char* name_of_entry) {
  if (l.tensors[0] == nullptr) return;
  const bool copy = std::strcmp(name_of_entry, "copy") == 0;
  const Tensor* shown = l.tensors[0];
  for (const Tensor* t : l.tensors)
    if (!copy && t != nullptr && is_floating(t->dtype())) {
      shown = t;
      break;
    }
  l.text += ' ';
  l.text += name(shown->dtype());
  if (copy && l.tensors[1] != nullptr && l.tensors[1]->dtype() != l.tensors[0]->dtype()) {
    l.text += "->";
    l.text += name(l.tensors[1]->dtype());
  }
}

}  // namespace tandem::kernel_calls
