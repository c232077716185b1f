// parallel/store/file_store.h — a store in a directory every rank can see (a local or shared
// file system): one file per key, written atomically, counters updated under flock(2). It needs
// no server, so `file:///path` rendezvous works even when no rank can listen on a port.
// Use a fresh directory (or a PrefixStore with a run id) per job: keys left by an earlier run
// would be read as this run's.
#pragma once

#include <tandem/parallel/store/store.h>

namespace tandem::parallel {

class FileStore : public Store {
 public:
  /// Opens (creating it if needed) the store directory `path`.
  explicit FileStore(std::string path);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::set;
  using Store::wait;

  const std::string& path() const { return path_; }

 private:
  std::string file_of(const std::string& key) const;

  std::string path_;
};

}  // namespace tandem::parallel
