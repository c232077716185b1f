// parallel/store/prefix_store.h — a namespace inside another store: every key becomes
// "<prefix>/<key>". Two process groups, or two runs sharing a FileStore directory, stay apart.
#pragma once

#include <tandem/parallel/store/store.h>
#include <memory>

namespace tandem::parallel {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  using Store::set;
  using Store::wait;

  Store& underlying() { return *store_; }

 private:
  std::string key(const std::string& k) const { return prefix_ + "/" + k; }
  std::vector<std::string> keys(const std::vector<std::string>& ks) const;

  std::string prefix_;
  std::shared_ptr<Store> store_;
};

}  // namespace tandem::parallel
