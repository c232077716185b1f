// core/env.cpp — see env.h.
#include <tandem/core/check.h>
#include <tandem/core/env.h>
#include <charconv>
#include <cstdint>
#include <cstdlib>

namespace tandem::detail {

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

int64_t env_int(const char* name, int64_t fallback) {
  const std::string v = env_str(name);
  return v.empty() ? fallback : parse_env_int(name, v);
}

int64_t parse_env_int(const char* name, const std::string& v) {
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  TD_CHECK_VALUE(ec == std::errc() && end == v.data() + v.size(), "environment variable ", name,
                 "='", v, "' is not an integer");
  // Callers keep ranks, ports and counts in an int: a wider value must not wrap into a valid one
  // (RANK=4294967296 would otherwise read as rank 0).
  TD_CHECK_VALUE(out >= INT32_MIN && out <= INT32_MAX, "environment variable ", name, "='", v,
                 "' is out of range (it must fit in 32 bits)");
  return out;
}

}  // namespace tandem::detail
