// core/serialize/atomic_file.cpp — the write-to-temp, fsync, rename, fsync-directory sequence
// (POSIX). rename() within one directory is atomic, so `path` names the old file or the new one at
// every instant; the two fsyncs make that true after a power loss too, not only after a crash.
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace tandem {
namespace {

std::string errno_text(int err) { return str(std::strerror(err), " (errno ", err, ")"); }

// The directory holding `path`, where the temporary file must live: rename() is only atomic
// within one file system, and the directory entry is what the final fsync makes durable.
std::string directory_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// Consumes a run of decimal digits at the front of `s` into `value`; false when there is none or
// it exceeds INT_MAX (a pid_t). The bound matters: a larger number would wrap to a negative pid,
// and kill() with a negative pid (or 0) addresses a whole process group.
bool take_number(std::string_view& s, long& value) {
  size_t n = 0;
  value = 0;
  while (n < s.size() && s[n] >= '0' && s[n] <= '9') {
    value = value * 10 + (s[n] - '0');
    if (value > INT_MAX) return false;
    ++n;
  }
  s.remove_prefix(n);
  return n > 0;
}

// The writer's pid when `name` is a temporary of the file called `base` (see the header for the
// names), else 0.
pid_t temporary_owner(std::string_view name, std::string_view base) {
  if (!name.starts_with(base)) return 0;
  std::string_view rest = name.substr(base.size());
  const size_t tmp = rest.rfind(".tmp.");
  if (tmp == std::string_view::npos) return 0;
  // Nothing between the base and ".tmp.", or a ".suffix": "model.safetensors2.tmp.7" belongs to
  // another file.
  if (tmp != 0 && rest[0] != '.') return 0;
  rest.remove_prefix(tmp + 5);
  long pid = 0, counter = 0;
  if (!take_number(rest, pid) || pid <= 0) return 0;
  if (rest.starts_with('.')) {
    rest.remove_prefix(1);
    if (!take_number(rest, counter)) return 0;
  }
  return rest.empty() ? pid_t(pid) : 0;
}

}  // namespace

std::vector<std::string> remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  const std::string base = fs::path(path).filename().string();
  if (base.empty()) return removed;
  std::error_code ec;
  for (fs::directory_iterator it(directory_of(path), ec), end; !ec && it != end; it.increment(ec)) {
    const pid_t pid = temporary_owner(it->path().filename().string(), base);
    // Only ESRCH means no such process; EPERM means one lives that we may not signal.
    if (pid == 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code file_ec;
    // Never through a symbolic link, and never a directory: a writer only leaves plain files.
    if (!it->is_regular_file(file_ec) || it->is_symlink(file_ec)) continue;
    if (fs::remove(it->path(), file_ec)) removed.push_back(it->path().string());
  }
  return removed;
}

AtomicFile::AtomicFile(std::string path, std::string op)
    : path_(std::move(path)), temp_path_(str(path_, ".tmp.", ::getpid())), op_(std::move(op)) {
  TD_CHECK_VALUE(!path_.empty(), op_, ": the file path is empty");
  // Each save killed mid-write leaves a whole temporary checkpoint (issue 55: 383 MB of them after
  // 12 kills); the next save of the same file is the first moment that can notice them.
  remove_stale_temporaries(path_);
  // O_TRUNC rather than O_EXCL: a temp file left by a killed process whose pid we now reuse is
  // ours to overwrite.
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    throw Error(str(op_, ": cannot create temporary file ", temp_path_, " to write ", path_, ": ",
                    errno_text(err)));
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  throw Error(str(op_, ": ", what, " ", path_, " (temporary file ", temp_path_,
                  ", removed; the previous file is unchanged): ", errno_text(err)));
}

void AtomicFile::write(const void* data, size_t nbytes) {
  TD_CHECK(fd_ >= 0 && !committed_, op_, ": write to ", path_, " after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    // Linux moves at most ~2 GiB per call; larger tensors take several.
    const ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", errno);
    }
    if (n == 0) fail("cannot write", EIO);
    p += n;
    nbytes -= size_t(n);
  }
}

void AtomicFile::commit() {
  TD_CHECK(fd_ >= 0 && !committed_, op_, ": commit of ", path_, " twice or after a failure");
  // Data first: without this fsync a crash after rename() could leave `path` naming a file whose
  // blocks were never written (the classic zero-length file after a power loss).
  if (::fsync(fd_) != 0) fail("cannot fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close", errno);
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("cannot rename the new file over", errno);
  committed_ = true;
  // The rename is done and the new contents are in place; only its durability is left. A failure
  // here still throws (the caller asked for a durable file) but there is no temp file to remove.
  const std::string dir = directory_of(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    const int err = errno;
    throw Error(str(op_, ": wrote ", path_, " but cannot open its directory ", dir,
                    " to fsync it: ", errno_text(err)));
  }
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  // EINVAL: the file system cannot sync directories (some FUSE and network mounts); nothing to do.
  if (rc != 0 && err != EINVAL)
    throw Error(str(op_, ": wrote ", path_, " but cannot fsync its directory ", dir, ": ",
                    errno_text(err)));
}

}  // namespace tandem
