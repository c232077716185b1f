// parallel/comm/locality.cpp — host identity from the kernel's own words.
#include <tandem/parallel/comm/locality.h>
#include <unistd.h>
#include <climits>
#include <fstream>

namespace tandem::parallel {
namespace {

std::string link(const char* path) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : "?";
}

}  // namespace

std::string host_identity() {
  char host[HOST_NAME_MAX + 1] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot = "?";
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + " " + boot + " " + link("/proc/self/ns/mnt") + " " +
         link("/proc/self/ns/pid");
}

bool all_ranks_on_one_host(Store& store, int rank, int size, const std::string& key_prefix) {
  const std::string mine = host_identity();
  store.set(key_prefix + std::to_string(rank), mine);
  bool same = true;
  for (int r = 0; r < size; ++r)
    if (r != rank) same = same && store.get_string(key_prefix + std::to_string(r)) == mine;
  return same;
}

}  // namespace tandem::parallel
