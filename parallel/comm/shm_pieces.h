// parallel/comm/shm_pieces.h — a list of tensors read as one array, as the shared-memory
// collectives read DDP's and ZeRO's buckets: each tensor a piece (its bytes and element count),
// the array their concatenation, and copies between a range of the array and contiguous bytes.
// With them a bucket is reduced or gathered where its tensors lie, with no packing into one
// buffer before nor copying back after.
#pragma once

#include <tandem/parallel/comm/shm_reduce.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

namespace tandem::parallel::detail {

/// `count` elements at `data`.
struct ShmPiece {
  char* data;
  int64_t count;
};

/// Calls fn(address, index, n) for each stretch of the elements [lo, hi) of the array that lies
/// within one piece: its first element's address and index in the array, and its length.
/// Elements past the array's end are not visited.
template <typename Fn>
void for_each_stretch(std::span<const ShmPiece> pieces, size_t element_size, int64_t lo, int64_t hi,
                      Fn fn) {
  int64_t start = 0;  // the index of the piece's first element
  for (const ShmPiece& p : pieces) {
    if (start >= hi) break;
    const int64_t end = start + p.count;
    const int64_t a = std::max(lo, start), b = std::min(hi, end);
    if (a < b) fn(p.data + size_t(a - start) * element_size, a, b - a);
    start = end;
  }
}

/// The elements in all the pieces.
inline int64_t total_count(std::span<const ShmPiece> pieces) {
  int64_t n = 0;
  for (const ShmPiece& p : pieces) n += p.count;
  return n;
}

/// Elements [lo, hi) of the array to contiguous bytes at `out`; those past its end (a padded
/// chunk's tail) are written as zeros.
inline void shm_pack(std::span<const ShmPiece> pieces, size_t es, int64_t lo, int64_t hi,
                     char* out) {
  for_each_stretch(pieces, es, lo, hi, [&](char* at, int64_t i, int64_t n) {
    shm_copy(out + size_t(i - lo) * es, at, size_t(n) * es);
  });
  const int64_t end = std::clamp(total_count(pieces), lo, hi);
  if (end < hi) std::memset(out + size_t(end - lo) * es, 0, size_t(hi - end) * es);
}

/// Contiguous bytes at `in` to elements [lo, hi) of the array; those past its end are dropped.
inline void shm_unpack(std::span<const ShmPiece> pieces, size_t es, int64_t lo, int64_t hi,
                       const char* in) {
  for_each_stretch(pieces, es, lo, hi, [&](char* at, int64_t i, int64_t n) {
    shm_copy(at, in + size_t(i - lo) * es, size_t(n) * es);
  });
}

}  // namespace tandem::parallel::detail
