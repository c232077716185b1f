// data/file_io.h — byte-level file access for the data readers and writers: a reader that takes
// raw or gzipped files alike (zlib reads uncompressed files transparently), and an atomic writer
// (temporary file in the same directory, fsync, rename, fsync the directory) so an interrupted
// write never leaves a torn data file behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tandem::data::detail {

class GzReader {
 public:
  /// Opens `path`; DataError "<who>: <path>: ..." if it does not exist or cannot be opened.
  GzReader(const std::string& path, std::string_view who);
  ~GzReader();
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  /// Reads up to `n` bytes into `out`; fewer only at the end of the data. DataError naming the
  /// file for corrupt or truncated gzip data.
  size_t read(void* out, size_t n);
  const std::string& path() const { return path_; }

 private:
  void* file_;  // gzFile, kept out of the header so users need no zlib include
  std::string path_;
  std::string who_;
};

/// Writes the concatenation of `parts` to `path` atomically; gzip-compressed when `gzip`.
/// DataError naming the file (and the OS error) on failure; the temporary file is removed.
void write_file_atomically(const std::string& path, std::span<const std::string_view> parts,
                           bool gzip);

/// True when `path` ends in ".gz".
bool has_gz_suffix(std::string_view path);

}  // namespace tandem::data::detail
