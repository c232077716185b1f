// data/file_io.cpp — zlib-backed reading and atomic writing. gzread on a file without a gzip
// header returns its bytes unchanged, so one reader serves "train-images-idx3-ubyte" and
// "train-images-idx3-ubyte.gz". Writing goes through gzdopen on our own descriptor ("T" mode for
// uncompressed output) so the data can be fsync'ed before the rename makes it visible.
#include <fcntl.h>
#include <tandem/core/check.h>
#include <tandem/core/serialize/atomic_file.h>
#include <tandem/data/file_io.h>
#include <unistd.h>
#include <zlib.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tandem::data::detail {
namespace fs = std::filesystem;

GzReader::GzReader(const std::string& path, std::string_view who)
    : file_(nullptr), path_(path), who_(who) {
  std::error_code ec;
  TD_CHECK_AS(DataError, fs::exists(path, ec), who_, ": ", path_, ": no such file");
  TD_CHECK_AS(DataError, !fs::is_directory(path, ec), who_, ": ", path_,
              ": is a directory, not a data file");
  errno = 0;
  file_ = gzopen(path.c_str(), "rb");
  TD_CHECK_AS(DataError, file_ != nullptr, who_, ": ", path_,
              ": cannot open: ", errno != 0 ? std::strerror(errno) : "out of memory");
  gzbuffer(static_cast<gzFile>(file_), 1 << 17);  // fewer syscalls than the 8 KiB default
}

GzReader::~GzReader() {
  if (file_ != nullptr) gzclose_r(static_cast<gzFile>(file_));
}

size_t GzReader::read(void* out, size_t n) {
  gzFile f = static_cast<gzFile>(file_);
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
    const int r = gzread(f, static_cast<char*>(out) + got, chunk);
    int err = Z_OK;
    std::string_view msg = gzerror(f, &err);
    if (msg.starts_with(path_ + ": ")) msg.remove_prefix(path_.size() + 2);  // zlib adds the path
    // A gzip stream that stops mid-way reads as Z_BUF_ERROR; bad data as Z_DATA_ERROR.
    TD_CHECK_AS(DataError, err == Z_OK, who_, ": ", path_,
                err == Z_BUF_ERROR ? ": truncated gzip data (the compressed stream ends early; "
                                     "the download was probably cut off)"
                                   : ": corrupt gzip data: ",
                err == Z_BUF_ERROR ? "" : msg);
    if (r <= 0) break;
    got += size_t(r);
  }
  return got;
}

bool has_gz_suffix(std::string_view path) {
  return path.size() >= 3 && path.substr(path.size() - 3) == ".gz";
}

namespace {

[[noreturn]] void write_failed(const std::string& path, const std::string& tmp, const char* what,
                               int err) {
  std::error_code ec;
  fs::remove(tmp, ec);
  tandem::detail::fail<DataError>("writing ", path, ": ", what,
                                  " failed: ", err != 0 ? std::strerror(err) : "unknown error");
}

void write_to_fd(int fd, const std::string& path, const std::string& tmp,
                 std::span<const std::string_view> parts, bool gzip) {
  const int copy = dup(fd);  // gzclose closes its descriptor; we still need one for fsync
  if (copy < 0) write_failed(path, tmp, "dup", errno);
  gzFile gz = gzdopen(copy, gzip ? "wb6" : "wbT");
  if (gz == nullptr) {
    close(copy);
    write_failed(path, tmp, "gzdopen", errno);
  }
  for (std::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      const unsigned chunk = unsigned(std::min<size_t>(part.size() - done, size_t(1) << 30));
      if (gzwrite(gz, part.data() + done, chunk) != int(chunk)) {
        const int saved = errno;
        int err = Z_OK;
        const std::string msg = gzerror(gz, &err);  // copied: gzclose frees it
        gzclose_w(gz);
        std::error_code ec;
        fs::remove(tmp, ec);
        tandem::detail::fail<DataError>(
            "writing ", path, ": write failed: ", err == Z_ERRNO ? std::strerror(saved) : msg);
      }
      done += chunk;
    }
  }
  if (gzclose_w(gz) != Z_OK) write_failed(path, tmp, "close", errno);
  if (fsync(fd) != 0) write_failed(path, tmp, "fsync", errno);
}

}  // namespace

void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           bool gzip) {
  // A write killed part way left its temporary: removed now that its writer is gone.
  remove_stale_temporaries(path);
  // Unique per process and per call, so concurrent writers of one path never share a temp file.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      str(path, ".tmp.", getpid(), ".", counter.fetch_add(1, std::memory_order_relaxed));
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TD_CHECK_AS(DataError, fd >= 0, "writing ", path, ": cannot create ", tmp, ": ",
              std::strerror(errno));
  try {
    write_to_fd(fd, path, tmp, parts, gzip);
  } catch (...) {
    close(fd);
    throw;
  }
  if (close(fd) != 0) write_failed(path, tmp, "close", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) write_failed(path, tmp, "rename", errno);
  // Make the rename itself durable: fsync the directory that now names the file.
  const fs::path dir = fs::path(path).parent_path();
  const int dfd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);  // best effort: some filesystems refuse fsync on directories
    close(dfd);
  }
}

}  // namespace tandem::data::detail
