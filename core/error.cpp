// core/error.cpp — the out-of-line part of the error machinery.
#include <tandem/core/error.h>

namespace tandem::detail {

void internal_error(const char* cond, const char* file, int line, const std::string& msg) {
  throw Error(str("internal error in Tandem (please report): ", cond, " failed at ", file, ":",
                  line, msg.empty() ? "" : ": ", msg));
}

}  // namespace tandem::detail
