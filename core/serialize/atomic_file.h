// core/serialize/atomic_file.h — writes a file so that a reader (or a crash) sees either the old
// contents or the complete new ones, never a torn file: the bytes go to `<path>.tmp.<pid>` in the
// same directory, which is fsync'ed, closed, renamed over `path`, and the directory fsync'ed.
// Checkpoints use it; anything else that must survive a crash mid-write can too. A writer that is
// killed cannot remove its temporary file, so each new AtomicFile first removes those of dead
// writers (remove_stale_temporaries), and a resume can call that too before it reads.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tandem {

/// A file written atomically. Errors throw `Error` naming the path and the errno text; when one
/// is thrown, or the object is destroyed before commit(), the temporary file is removed.
class AtomicFile {
 public:
  /// Removes the stale temporaries of `path` (remove_stale_temporaries), then creates
  /// `<path>.tmp.<pid>` next to it; `op` prefixes error messages ("save_safetensors").
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

/// Removes, from the directory of `path`, the temporary files that writers killed mid-write left
/// behind: `<path>.tmp.<pid>` and `<path>.<suffix>.tmp.<pid>` (model.safetensors.next.tmp.<pid>
/// for `model.safetensors`), each also with a `.<n>` after the pid (data/file_io, FileStore),
/// whose <pid> is no live process on this host (kill(pid, 0) fails with ESRCH). A temporary of a
/// live process (this one included) is kept, as it may be being written now. Returns the paths
/// removed. Best effort: a directory that cannot be listed or a file that cannot be removed is
/// skipped, never an error. Only processes in this pid namespace are seen, so a directory written
/// at the same time from another host or container must not be cleaned this way.
std::vector<std::string> remove_stale_temporaries(const std::string& path);

}  // namespace tandem
