// core/env.cpp — see env.h.
#include <tandem/core/check.h>
#include <tandem/core/env.h>
#include <charconv>
#include <cstdlib>

namespace tandem::detail {

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

int64_t env_int(const char* name, int64_t fallback) {
  const std::string v = env_str(name);
  if (v.empty()) return fallback;
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  TD_CHECK_VALUE(ec == std::errc() && end == v.data() + v.size(), "environment variable ", name,
                 "='", v, "' is not an integer");
  return out;
}

}  // namespace tandem::detail
