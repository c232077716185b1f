// core/dtype.cpp — dtype names, from the table.
#include <tandem/core/dtype.h>
#include <ostream>

namespace tandem {

std::string_view name(DType t) {
  return size_t(t) < kNumDTypes ? info(t).name : std::string_view("unknown");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << name(t); }

}  // namespace tandem
