// core/serialize/atomic_file.h — writes a file so that a reader (or a crash) sees either the old
// contents or the complete new ones, never a torn file: the bytes go to `<path>.tmp.<pid>` in the
// same directory, which is fsync'ed, closed, renamed over `path`, and the directory fsync'ed.
// Checkpoints use it; anything else that must survive a crash mid-write can too.
#pragma once

#include <cstddef>
#include <string>

namespace tandem {

/// A file written atomically. Errors throw `Error` naming the path and the errno text; when one
/// is thrown, or the object is destroyed before commit(), the temporary file is removed.
class AtomicFile {
 public:
  /// Creates `<path>.tmp.<pid>` next to `path`; `op` prefixes error messages ("save_safetensors").
  AtomicFile(std::string path, std::string op);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `nbytes` bytes (retries short writes and EINTR).
  void write(const void* data, size_t nbytes);
  /// fsync, close, rename over the target, fsync the directory. After it, `path` holds the new
  /// contents and survives a power loss.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);  // removes the temp file, throws
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  std::string op_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace tandem
