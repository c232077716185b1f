// tests/fuzz/fuzz_idx.cpp — libFuzzer target: the IDX readers (MNIST's image and label files),
// raw and gzipped. The first input byte picks how the rest reaches the reader: 0 as it is, 1
// gzip-compressed here (so mutations reach the IDX parser behind zlib, which a mutated gzip
// stream would not, its CRC failing first), 2 half compressed and half raw (junk after a valid
// gzip stream). Only a result or a tandem::Error is acceptable. Seeds: corpus/idx/.
#include <tandem/core/error.h>
#include <tandem/data/idx.h>
#include <zlib.h>
#include <vector>

#include "fuzz_util.h"

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) std::abort();
  std::vector<uint8_t> out(deflateBound(&z, uLong(size)));
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = uInt(size);
  z.next_out = out.data();
  z.avail_out = uInt(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  std::vector<uint8_t> bytes(body, body + n);
  if (mode == 1) bytes = gzip(body, n);
  if (mode == 2) {
    bytes = gzip(body, n / 2);
    bytes.insert(bytes.end(), body + n / 2, body + n);
  }
  const std::string path = tandem::fuzz::write_file("input-idx", bytes.data(), bytes.size());
  try {
    const auto images = tandem::data::read_idx_images(path);
    // In 128 bits: a header may claim 4e9 images of 4e9 rows and 0 columns, which is empty.
    const auto claimed = __uint128_t(images.count) * uint64_t(images.rows) * uint64_t(images.cols);
    if (images.pixels.size() != claimed) std::abort();
  } catch (const tandem::Error&) {
  }
  try {
    (void)tandem::data::read_idx_labels(path);
  } catch (const tandem::Error&) {
  }
  return 0;
}
