// core/shape.cpp — shape arithmetic shared by every op.
#include <tandem/core/check.h>
#include <tandem/core/shape.h>
#include <algorithm>
#include <ostream>

namespace tandem {

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  TD_CHECK_INDEX(dim >= lo && dim <= hi, op, ": dimension ", dim,
                 " is out of range for a tensor with ", ndim, " dimensions (expected a dim in [",
                 lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    TD_CHECK_SHAPE(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                   " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db,
                   "; sizes must be equal or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tandem
