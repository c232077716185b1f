// parallel/store/file_store.cpp — keys are hex-encoded into file names (any byte is allowed in a
// key); a value is written to a temporary file and renamed into place, so a reader never sees half
// of it; add() holds an exclusive flock on "<dir>/.lock" across its read-modify-write.
#include <fcntl.h>
#include <sys/file.h>
#include <tandem/core/check.h>
#include <tandem/parallel/store/file_store.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace tandem::parallel {
namespace {

namespace fs = std::filesystem;

std::string hex(const std::string& key) {
  static const char* digits = "0123456789abcdef";
  std::string out = "k";
  for (unsigned char c : key) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool read_file(const std::string& file, Bytes& out) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

void write_atomically(const std::string& file, const Bytes& value) {
  const std::string tmp = file + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(value.data()), std::streamsize(value.size()));
    TD_CHECK_AS(DistributedError, out.good(), "FileStore: cannot write '", tmp, "'");
  }
  TD_CHECK_AS(DistributedError, std::rename(tmp.c_str(), file.c_str()) == 0,
              "FileStore: cannot rename '", tmp, "' to '", file, "': ", std::strerror(errno));
}

// An exclusive flock on the store's lock file for the lifetime of the guard.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    const std::string file = dir + "/.lock";
    fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    TD_CHECK_AS(DistributedError, fd_ >= 0, "FileStore: cannot open '", file,
                "': ", std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~DirLock() { ::close(fd_); }  // closing releases the lock
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  fs::create_directories(path_, ec);
  TD_CHECK_AS(DistributedError, fs::is_directory(path_), "FileStore: '", path_,
              "' is not a directory and cannot be created",
              ec ? ": " + ec.message() : std::string());
}

std::string FileStore::file_of(const std::string& key) const { return path_ + "/" + hex(key); }

void FileStore::set(const std::string& key, const Bytes& value) {
  write_atomically(file_of(key), value);
}

Bytes FileStore::get(const std::string& key) {
  Bytes out;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    wait({key}, std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()));
    if (read_file(file_of(key), out)) return out;  // else deleted in between: wait again
  }
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirLock lock(path_);
  Bytes old;
  const int64_t sum =
      detail::counter_plus(key, read_file(file_of(key), old) ? &old : nullptr, delta);
  write_atomically(file_of(key), detail::counter_bytes(sum));
  return sum;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (::access(file_of(k).c_str(), F_OK) != 0) return false;
  return true;
}

bool FileStore::delete_key(const std::string& key) { return ::unlink(file_of(key).c_str()) == 0; }

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  // Polling: other processes write the files, and a shared file system may not deliver inotify
  // events. 5 ms keeps rendezvous quick without spinning.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!check(keys)) {
    TD_CHECK_AS(DistributedError, std::chrono::steady_clock::now() < deadline, "FileStore '", path_,
                "': waited ", timeout.count() / 1000.0, " s for ", detail::quote_keys(keys),
                ", which no rank wrote (timeout)\n  hint: did every rank start, with the same "
                "file:// path?");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace tandem::parallel
