// parallel/store/store.h — the key-value store every rank meets at (PyTorch's c10d::Store). Ranks
// publish addresses and counters here before any collective can run: Gloo's full-mesh rendezvous
// and NCCL's unique-id exchange both go through it. Implementations: TCPStore (rank 0 serves),
// FileStore (a shared directory), HashStore (one process), PrefixStore (a namespace in another).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::parallel {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

  virtual ~Store();

  /// Stores `value` under `key`, replacing an earlier value, and wakes anyone waiting for it.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// The value of `key`, waiting up to timeout() for it to appear (DistributedError otherwise).
  virtual Bytes get(const std::string& key) = 0;
  /// Adds `delta` to the integer under `key` (a missing key counts as 0) and returns the sum.
  /// Values are decimal text, as in PyTorch, so get() on a counter reads "3".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Whether every key exists now (no waiting).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Removes `key`; false if it did not exist.
  virtual bool delete_key(const std::string& key) = 0;
  /// Waits until every key exists, or throws DistributedError naming the missing ones after
  /// `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  void set(const std::string& key, const std::string& value);
  std::string get_string(const std::string& key);

  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

namespace detail {
/// "key 'a', 'b'" for error messages.
std::string quote_keys(const std::vector<std::string>& keys);
/// Parses a counter's decimal text; DistributedError naming the key when it is not an integer.
int64_t parse_counter(const std::string& key, const Bytes& value);
Bytes counter_bytes(int64_t value);
/// The counter under `key` (`old`, or 0 when null) plus `delta`; DistributedError when the value
/// is not a counter or the sum leaves the 64-bit range (a wrapped counter would be a silent lie).
int64_t counter_plus(const std::string& key, const Bytes* old, int64_t delta);
}  // namespace detail

}  // namespace tandem::parallel
