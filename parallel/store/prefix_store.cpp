// parallel/store/prefix_store.cpp — forwards every call with the prefix added to the keys.
#include <tandem/core/check.h>
#include <tandem/parallel/store/prefix_store.h>

namespace tandem::parallel {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  TD_CHECK_VALUE(store_ != nullptr, "PrefixStore('", prefix_, "'): the underlying store is null");
  timeout_ = store_->timeout();
}

std::vector<std::string> PrefixStore::keys(const std::vector<std::string>& ks) const {
  std::vector<std::string> out;
  out.reserve(ks.size());
  for (const auto& k : ks) out.push_back(key(k));
  return out;
}

void PrefixStore::set(const std::string& k, const Bytes& value) { store_->set(key(k), value); }
Bytes PrefixStore::get(const std::string& k) { return store_->get(key(k)); }
int64_t PrefixStore::add(const std::string& k, int64_t delta) { return store_->add(key(k), delta); }
bool PrefixStore::check(const std::vector<std::string>& ks) { return store_->check(keys(ks)); }
bool PrefixStore::delete_key(const std::string& k) { return store_->delete_key(key(k)); }
void PrefixStore::wait(const std::vector<std::string>& ks, std::chrono::milliseconds timeout) {
  store_->wait(keys(ks), timeout);
}
void PrefixStore::set_timeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  store_->set_timeout(timeout);
}

}  // namespace tandem::parallel
