// parallel/failure_record.cpp — the error file a worker writes once, with O_EXCL so that the
// first cause a process saw is the one that stays (a heartbeat thread and a collective may both
// notice the same death).
#include <fcntl.h>
#include <tandem/parallel/failure_record.h>
#include <unistd.h>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tandem::parallel::detail {

void record_peer_failure(int peer_rank) {
  const char* path = std::getenv(kErrorFileEnv);
  if (path == nullptr || *path == '\0') return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string line = "peer_rank " + std::to_string(peer_rank) + "\n";
  [[maybe_unused]] const ssize_t w = ::write(fd, line.data(), line.size());
  ::close(fd);
}

std::optional<int> read_peer_failure(const std::string& path) {
  std::ifstream in(path);
  std::string key;
  int rank = -1;
  if (in >> key >> rank && key == "peer_rank" && rank >= 0) return rank;
  return std::nullopt;
}

void record_own_exit(int exit_code) {
  const char* path = std::getenv(kErrorFileEnv);
  if (path == nullptr || *path == '\0') return;
  const int fd =
      ::open((std::string(path) + ".exit").c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string line = "exit_code " + std::to_string(exit_code) + "\n";
  [[maybe_unused]] const ssize_t w = ::write(fd, line.data(), line.size());
  ::close(fd);
}

std::optional<int> read_own_exit(const std::string& error_file) {
  std::ifstream in(error_file + ".exit");
  std::string key;
  int code = 0;
  if (in >> key >> code && key == "exit_code") return code;
  return std::nullopt;
}

}  // namespace tandem::parallel::detail
