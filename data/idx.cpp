// data/idx.cpp — reading and writing IDX files. The header is read first and checked (magic,
// then sizes), then the size it promises against the file's own size where that is known (a raw
// file), before any buffer is allocated; gzip data is read into a buffer that grows only as bytes
// arrive. Either way a corrupt header claiming terabytes fails as "truncated" instead of
// allocating them. After the data, one more byte is tried: a file longer than its header says is
// as suspect as a short one.
#include <tandem/core/check.h>
#include <tandem/data/file_io.h>
#include <tandem/data/idx.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

namespace tandem::data {
namespace {

uint32_t big_endian(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

void put_big_endian(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xff));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Reads the N-byte header (magic first) into `header`, checking the magic before the sizes.
template <size_t N>
void read_header(detail::GzReader& in, std::string_view who, std::array<uint8_t, N>& header,
                 uint32_t magic, const char* kind) {
  const size_t got = in.read(header.data(), 4);
  TD_CHECK_AS(DataError, got == 4, who, ": ", in.path(), ": truncated header: expected ", N,
              " bytes, found ", got);
  const uint32_t found = big_endian(header.data());
  TD_CHECK_AS(DataError, found == magic, who, ": ", in.path(), ": bad magic ", hex32(found),
              " (expected ", hex32(magic), "): not an IDX ", kind, " file, or truncated");
  const size_t rest = in.read(header.data() + 4, N - 4);
  TD_CHECK_AS(DataError, rest == N - 4, who, ": ", in.path(), ": truncated header: expected ", N,
              " bytes, found ", 4 + rest);
}

// The size of `path` when it will be read as it is, so that what the header promises can be
// checked before a byte is allocated; nullopt for gzip data (magic 1f 8b, the test zlib's reader
// makes) and for what is not a regular file, whose length is only known by reading it.
std::optional<uint64_t> raw_size(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || !std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  unsigned char magic[2] = {0, 0};
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(magic), 2);
  if (magic[0] == 0x1f && magic[1] == 0x8b) return std::nullopt;
  return size;
}

// Reads exactly `want` data bytes (what: "pixel data (60000 images of 28x28)"), then checks that
// nothing follows them. `file_size`, when known, is checked first: a 20-byte file whose header
// promises 47 MB is refused before the buffer exists. Otherwise (gzip) the buffer grows only as
// data arrives, by at most what has been read so far (at least 1 MiB, at most 64 MiB), so a lying
// header costs at most one step past the real data.
std::vector<uint8_t> read_data(detail::GzReader& in, std::string_view who, uint64_t want,
                               size_t header_bytes, const std::string& what,
                               std::optional<uint64_t> file_size) {
  const auto truncated = [&](uint64_t found, const std::string& size) {
    return str(who, ": ", in.path(), ": truncated: expected ", want, " bytes of ", what,
               " after the ", header_bytes, "-byte header, found ", found, " (", size, " is ",
               header_bytes + found, " bytes; its header promises ", header_bytes, " + ", want,
               " = ", header_bytes + want, ")");
  };
  if (file_size) {
    // The header was read whole, so the file held it when it was measured; max() is for a file
    // replaced in between.
    TD_CHECK_AS(DataError, *file_size >= header_bytes + want,
                truncated(std::max<uint64_t>(*file_size, header_bytes) - header_bytes, "the file"));
    TD_CHECK_AS(DataError, *file_size == header_bytes + want, who, ": ", in.path(),
                ": size mismatch: the header promises ", header_bytes, " + ", want, " = ",
                header_bytes + want, " bytes but the file is ", *file_size,
                " bytes; not an IDX file of that size");
  }
  std::vector<uint8_t> out;
  size_t have = 0;
  while (have < want) {
    const uint64_t step = file_size ? want : std::clamp<uint64_t>(have, 1 << 20, 1 << 26);
    const size_t target = size_t(std::min<uint64_t>(want, have + step));
    out.reserve(target);  // exactly: resize alone may double the capacity, past `want`
    out.resize(target);
    const size_t got = in.read(out.data() + have, target - have);
    have += got;
    if (have < target) break;  // end of data
  }
  TD_CHECK_AS(
      DataError, have == want,
      truncated(have, file_size ? "the file, shrunk while read," : "the decompressed data"));
  uint8_t extra = 0;
  TD_CHECK_AS(DataError, in.read(&extra, 1) == 0, who, ": ", in.path(),
              ": size mismatch: the header promises ", header_bytes, " + ", want,
              " bytes but the file is longer; not an IDX file of that size");
  return out;
}

}  // namespace

namespace detail {

IdxImages read_idx_images(const std::string& path, std::string_view who) {
  const std::optional<uint64_t> file_size = raw_size(path);
  GzReader in(path, who);
  std::array<uint8_t, 16> h{};
  read_header(in, who, h, kIdxImagesMagic, "image");
  IdxImages images;
  images.count = big_endian(&h[4]);
  images.rows = big_endian(&h[8]);
  images.cols = big_endian(&h[12]);
  // Each factor is below 2^32, so count · rows fits in 64 bits; the last factor is checked first.
  constexpr uint64_t kLimit = uint64_t(1) << 48;  // 256 TiB: more than any real IDX file
  const uint64_t count_rows = uint64_t(images.count) * uint64_t(images.rows);
  TD_CHECK_AS(DataError, images.cols == 0 || count_rows <= kLimit / uint64_t(images.cols), who,
              ": ", path, ": header claims ", images.count, " images of ", images.rows, "x",
              images.cols, ", more bytes than any IDX file holds: corrupt header");
  const uint64_t bytes = count_rows * uint64_t(images.cols);
  images.pixels = read_data(
      in, who, bytes, h.size(),
      str("pixel data (", images.count, " images of ", images.rows, "x", images.cols, ")"),
      file_size);
  return images;
}

std::vector<int64_t> read_idx_labels(const std::string& path, std::string_view who) {
  const std::optional<uint64_t> file_size = raw_size(path);
  GzReader in(path, who);
  std::array<uint8_t, 8> h{};
  read_header(in, who, h, kIdxLabelsMagic, "label");
  const uint32_t count = big_endian(&h[4]);
  const std::vector<uint8_t> bytes =
      read_data(in, who, count, h.size(), str("label data (", count, " labels)"), file_size);
  return std::vector<int64_t>(bytes.begin(), bytes.end());
}

}  // namespace detail

IdxImages read_idx_images(const std::string& path) {
  return detail::read_idx_images(path, "read_idx_images");
}

std::vector<int64_t> read_idx_labels(const std::string& path) {
  return detail::read_idx_labels(path, "read_idx_labels");
}

void write_idx_images(const std::string& path, const IdxImages& images) {
  for (int64_t v : {images.count, images.rows, images.cols})
    TD_CHECK_VALUE(v >= 0 && v <= int64_t(UINT32_MAX), "write_idx_images: ", path,
                   ": count, rows and cols must fit in 32 bits, but got ", images.count, ", ",
                   images.rows, ", ", images.cols);
  const uint64_t n = uint64_t(images.count) * uint64_t(images.rows) * uint64_t(images.cols);
  TD_CHECK_VALUE(images.pixels.size() == n, "write_idx_images: ", path, ": ", images.count,
                 " images of ", images.rows, "x", images.cols, " need ", n, " pixels, but got ",
                 images.pixels.size());
  std::string header;
  for (uint32_t v :
       {kIdxImagesMagic, uint32_t(images.count), uint32_t(images.rows), uint32_t(images.cols)})
    put_big_endian(header, v);
  const std::string_view parts[] = {
      header, {reinterpret_cast<const char*>(images.pixels.data()), images.pixels.size()}};
  detail::write_file_atomically(path, parts, detail::has_gz_suffix(path));
}

void write_idx_labels(const std::string& path, const std::vector<int64_t>& labels) {
  TD_CHECK_VALUE(labels.size() <= UINT32_MAX, "write_idx_labels: ", path, ": ", labels.size(),
                 " labels do not fit in a 32-bit count");
  std::string body(labels.size(), '\0');
  for (size_t i = 0; i < labels.size(); ++i) {
    TD_CHECK_VALUE(labels[i] >= 0 && labels[i] <= 255, "write_idx_labels: ", path, ": label ",
                   labels[i], " at index ", i, " does not fit in a byte (0–255)");
    body[i] = char(uint8_t(labels[i]));
  }
  std::string header;
  put_big_endian(header, kIdxLabelsMagic);
  put_big_endian(header, uint32_t(labels.size()));
  const std::string_view parts[] = {header, body};
  detail::write_file_atomically(path, parts, detail::has_gz_suffix(path));
}

}  // namespace tandem::data
