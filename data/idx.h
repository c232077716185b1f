// data/idx.h — the IDX file format of MNIST and Fashion-MNIST (LeCun's "idx3-ubyte" images and
// "idx1-ubyte" labels): big-endian header, then raw bytes. Files may be gzipped; readers detect
// that from the content, writers compress when the name ends in ".gz". Every problem with a file
// is a DataError naming it and saying what is wrong (bad magic, truncated header or data, extra
// bytes), so a half-downloaded file is never read as data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // 2051: unsigned bytes, 3 dims
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // 2049: unsigned bytes, 1 dim

/// An IDX image file: `count` images of rows × cols pixels, row-major, one byte each.
struct IdxImages {
  int64_t count = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint8_t> pixels;  // count · rows · cols bytes
};

/// Reads an image file (16-byte header: magic 2051, count, rows, cols; then the pixels), raw or
/// gzipped. DataError naming `path` when it is missing, not IDX, truncated or too long.
IdxImages read_idx_images(const std::string& path);
/// Reads a label file (8-byte header: magic 2049, count; then one byte per label), raw or
/// gzipped. Any byte value is returned; range checks belong to the dataset (MNIST: 0–9).
std::vector<int64_t> read_idx_labels(const std::string& path);

/// Writes `images` to `path` (gzipped when it ends in ".gz"), through a temporary file in the
/// same directory renamed over `path`, so readers see the old file or the new one, never half.
/// ValueError when pixels.size() is not count · rows · cols; DataError when writing fails.
void write_idx_images(const std::string& path, const IdxImages& images);
/// Writes labels (each in 0–255, else ValueError) like write_idx_images.
void write_idx_labels(const std::string& path, const std::vector<int64_t>& labels);

namespace detail {
/// The readers, with errors prefixed by `who` ("MNIST") instead of the function name.
IdxImages read_idx_images(const std::string& path, std::string_view who);
std::vector<int64_t> read_idx_labels(const std::string& path, std::string_view who);
}  // namespace detail

}  // namespace tandem::data
