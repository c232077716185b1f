// core/serialize/atomic_file.cpp — the write-to-temp, fsync, rename, fsync-directory sequence
// (POSIX). rename() within one directory is atomic, so `path` names the old file or the new one at
// every instant; the two fsyncs make that true after a power loss too, not only after a crash.
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
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

}  // namespace

AtomicFile::AtomicFile(std::string path, std::string op)
    : path_(std::move(path)), temp_path_(str(path_, ".tmp.", ::getpid())), op_(std::move(op)) {
  TD_CHECK_VALUE(!path_.empty(), op_, ": the file path is empty");
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
