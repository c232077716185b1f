// parallel/store/hash_store.h — a store inside one process (threads meet here; tests use it to
// run several ranks as threads without sockets).
#pragma once

#include <tandem/parallel/store/store.h>
#include <condition_variable>
#include <map>
#include <mutex>

namespace tandem::parallel {

class HashStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::set;
  using Store::wait;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
};

}  // namespace tandem::parallel
