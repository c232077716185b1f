// parallel/store/hash_store.cpp — a map under a mutex; waiters sleep on a condition variable.
#include <tandem/core/check.h>
#include <tandem/parallel/store/hash_store.h>

namespace tandem::parallel {

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard lk(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  wait({key});
  std::lock_guard lk(mu_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t sum = 0;
  {
    std::lock_guard lk(mu_);
    const auto it = data_.find(key);
    sum = detail::counter_plus(key, it != data_.end() ? &it->second : nullptr, delta);
    data_[key] = detail::counter_bytes(sum);
  }
  cv_.notify_all();
  return sum;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard lk(mu_);
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard lk(mu_);
  return data_.erase(key) > 0;
}

void HashStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  const auto all_there = [&] {
    for (const auto& k : keys)
      if (!data_.count(k)) return false;
    return true;
  };
  TD_CHECK_AS(DistributedError, cv_.wait_for(lk, timeout, all_there), "HashStore: waited ",
              timeout.count() / 1000.0, " s for ", detail::quote_keys(keys),
              ", which no one set (timeout)");
}

}  // namespace tandem::parallel
