// core/dtype.cpp — dtype names.
#include <tandem/core/dtype.h>
#include <ostream>

namespace tandem {

std::string_view name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::i64:
      return "int64";
    case DType::b8:
      return "bool";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << name(t); }

}  // namespace tandem
