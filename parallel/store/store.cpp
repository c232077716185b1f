// parallel/store/store.cpp — what every store shares: string helpers and counter encoding.
#include <tandem/core/check.h>
#include <tandem/parallel/store/store.h>
#include <charconv>

namespace tandem::parallel {

Store::~Store() = default;

void Store::set(const std::string& key, const std::string& value) {
  set(key, Bytes(value.begin(), value.end()));
}

std::string Store::get_string(const std::string& key) {
  const Bytes v = get(key);
  return std::string(v.begin(), v.end());
}

namespace detail {

std::string quote_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

int64_t parse_counter(const std::string& key, const Bytes& value) {
  int64_t out = 0;
  const char* begin = reinterpret_cast<const char*>(value.data());
  const auto [end, ec] = std::from_chars(begin, begin + value.size(), out);
  TD_CHECK_AS(DistributedError, ec == std::errc() && end == begin + value.size(),
              "Store::add: the value under key '", key, "' is not an integer counter (it holds ",
              value.size(), " bytes)");
  return out;
}

int64_t counter_plus(const std::string& key, const Bytes* old, int64_t delta) {
  const int64_t value = old ? parse_counter(key, *old) : 0;
  int64_t sum = 0;
  TD_CHECK_AS(DistributedError, !__builtin_add_overflow(value, delta, &sum), "Store::add: ", value,
              " + ", delta, " under key '", key, "' overflows a 64-bit counter");
  return sum;
}

Bytes counter_bytes(int64_t value) {
  const std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

}  // namespace detail
}  // namespace tandem::parallel
