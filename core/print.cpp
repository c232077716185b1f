// core/print.cpp — printing tensors as PyTorch does: tensor([[1., 2.]], device='cpu:1').
// Floats use one format for the whole tensor, chosen from its values: integers print as "1.",
// moderate values with 4 decimals, and wide ranges in scientific notation. Tensors over 1000
// elements are summarised with "..." (3 items each side per dim).
#include <tandem/core/layout.h>
#include <tandem/core/tensor.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

namespace tandem {
namespace {

constexpr int64_t kThreshold = 1000, kEdge = 3, kLineWidth = 80;

enum class Mode { Int, Fixed, Sci, Integer, Bool };

struct Formatter {
  Mode mode = Mode::Fixed;
  size_t width = 1;

  std::string raw(double v) const {
    char buf[64];
    if (mode == Mode::Bool) return v != 0 ? "True" : "False";
    if (mode == Mode::Integer) return std::to_string(int64_t(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (mode == Mode::Int)
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    else if (mode == Mode::Sci)
      std::snprintf(buf, sizeof buf, "%.4e", v);
    else
      std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
  std::string operator()(double v) const {
    std::string s = raw(v);
    return std::string(width > s.size() ? width - s.size() : 0, ' ') + s;
  }
};

// Row-major indices of the elements that will be shown (all, or the summarised corners).
void shown(const Shape& shape, const Strides& st, bool summarize, size_t d, int64_t base,
           std::vector<int64_t>& out) {
  if (d == shape.size()) {
    out.push_back(base);
    return;
  }
  for (int64_t i = 0; i < shape[d]; ++i) {
    if (summarize && shape[d] > 2 * kEdge && i == kEdge) i = shape[d] - kEdge;
    shown(shape, st, summarize, d + 1, base + i * st[d], out);
  }
}

Formatter choose(const std::vector<double>& values, DType dtype) {
  Formatter f;
  if (dtype == DType::b8)
    f.mode = Mode::Bool;
  else if (dtype == DType::i64)
    f.mode = Mode::Integer;
  else {
    double lo = INFINITY, hi = 0;
    bool ints = true;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      if (v != std::ceil(v)) ints = false;
      if (v != 0) {
        lo = std::min(lo, std::fabs(v));
        hi = std::max(hi, std::fabs(v));
      }
    }
    if (ints)
      f.mode = hi > 1e8 ? Mode::Sci : Mode::Int;
    else if (hi > 1e8 || (lo != INFINITY && (hi / lo > 1000.0 || lo < 1e-4)))
      f.mode = Mode::Sci;
    else
      f.mode = Mode::Fixed;
  }
  for (double v : values) f.width = std::max(f.width, f.raw(v).size());
  return f;
}

// Prints dims [d, ...) of the element grid starting at flat row-major index `base`.
void body(std::ostream& os, const std::vector<double>& data, const Shape& shape, const Strides& st,
          size_t d, int64_t base, bool summarize, const Formatter& f, size_t indent) {
  os << '[';
  const int64_t n = shape[d];
  const bool last = d + 1 == shape.size();
  const size_t per_line = std::max<size_t>(1, size_t(kLineWidth - int64_t(indent)) / (f.width + 2));
  size_t on_line = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) {
      if (last) {
        os << ',';
        if (++on_line % per_line == 0)
          os << '\n' << std::string(indent + 1, ' ');
        else
          os << ' ';
      } else {
        os << ',' << std::string(shape.size() - d - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << (last ? " ..." : "...");  // PyTorch pads the 1-D ellipsis like an element
      i = n - kEdge - 1;
      continue;
    }
    if (last)
      os << f(data[size_t(base + i * st[d])]);
    else
      body(os, data, shape, st, d + 1, base + i * st[d], summarize, f, indent + 1);
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  if (device().is_meta()) {  // as PyTorch: no values to show
    os << "..., device='" << device() << "', size=(";
    for (int64_t i = 0; i < dim(); ++i) os << (i ? ", " : "") << size(i);
    os << (dim() == 1 ? ",)" : ")");
    if (dtype() != kFloat32) os << ", dtype=" << name(dtype());
    return os.str() + (requires_grad() ? ", requires_grad=True)" : ")");
  }
  const bool summarize = numel() > kThreshold;
  std::vector<double> data = to_vector<double>();  // row-major, on the host
  const Strides st = contiguous_strides(shape());
  std::vector<int64_t> idx;
  if (numel() > 0) shown(shape(), st, summarize, 0, 0, idx);
  std::vector<double> visible;
  for (int64_t i : idx) visible.push_back(data[size_t(i)]);
  const Formatter f = choose(visible, dtype());
  if (numel() == 0) {
    os << "[]";
  } else if (dim() == 0) {
    os << f.raw(data[0]);
  } else {
    body(os, data, shape(), st, 0, 0, summarize, f, 7);
  }
  if (numel() == 0 && dim() != 1)
    os << ", size=(" << [&] {
      std::string s;
      for (int64_t i = 0; i < dim(); ++i) s += (i ? ", " : "") + std::to_string(size(i));
      return s + (dim() == 1 ? "," : "");
    }() << ")";
  if (device() != Device::cpu()) os << ", device='" << device() << "'";
  // As PyTorch: the default dtypes (float32, int64, bool) go unsaid.
  if (is_floating(dtype()) && dtype() != kFloat32) os << ", dtype=" << name(dtype());
  if (requires_grad()) os << ", requires_grad=True";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace tandem
