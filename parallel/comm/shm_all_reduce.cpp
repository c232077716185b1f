// parallel/comm/shm_all_reduce.cpp — the shared-memory all-reduce's two algorithms. They read
// their data as one array made of pieces: a single piece for all_reduce, one per tensor for
// all_reduce_coalesced. With pieces, DDP's bucket of gradients is reduced where the gradients
// lie: no copy into a flat buffer before, none back into .grad after (on the reference CNN,
// 2 ranks, those two copies cost as much as the all-reduce itself; bench/RESULTS.md).
#include <tandem/parallel/comm/dtype_dispatch.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <algorithm>
#include <array>
#include <vector>

namespace tandem::parallel {

using detail::ShmPiece;

using detail::shm_pack;
using detail::shm_unpack;

void ShmCommunicator::all_reduce_pieces(std::span<const ShmPiece> pieces, int64_t count,
                                        DType dtype, ReduceOp op) {
  if (size_t(count) * element_size(dtype) <= options_.direct_bytes) {
    all_reduce_direct(pieces, count, dtype, op);
  } else {
    all_reduce_large(pieces, count, dtype, op);
  }
}

// Every rank copies the round's elements into its buffer, then reduces all the buffers into its
// own pieces: one step per round. (At least one round, so an empty tensor still synchronises.)
void ShmCommunicator::all_reduce_direct(std::span<const ShmPiece> pieces, int64_t count,
                                        DType dtype, ReduceOp op) {
  const size_t es = element_size(dtype);
  const int64_t cap = capacity(es);
  for (int64_t off = 0; off < std::max<int64_t>(count, 1); off += cap) {
    const int64_t m = std::min(cap, count - off);
    shm_pack(pieces, es, off, off + m, buffer(rank_));
    step();
    detail::by_dtype(dtype, [&]<typename T>(T*) {
      // The sources on the stack up to 8 ranks: an allocation is a few percent of a 4 KB call.
      std::array<const T*, 8> few;
      std::vector<const T*> many(size_ > 8 ? size_t(size_) : 0);
      const T** srcs = size_ > 8 ? many.data() : few.data();
      detail::for_each_stretch(pieces, es, off, off + m, [&](char* at, int64_t i, int64_t n) {
        for (int r = 0; r < size_; ++r) srcs[r] = reinterpret_cast<const T*>(buffer(r)) + (i - off);
        detail::shm_reduce(reinterpret_cast<T*>(at), srcs, size_, n, op);
      });
    });
    ++rounds_;
  }
}

// Reduce-scatter then all-gather through the buffers. Only the slices the other ranks reduce go
// through shared memory on the way in: this rank reduces its own slice straight from its pieces,
// writing the result to them and, for the others to copy out, to its buffer.
void ShmCommunicator::all_reduce_large(std::span<const ShmPiece> pieces, int64_t count, DType dtype,
                                       ReduceOp op) {
  const size_t es = element_size(dtype);
  const int64_t cap = capacity(es);
  for (int64_t off = 0; off < count; off += cap) {
    const int64_t m = std::min(cap, count - off);
    auto lo = [&](int r) { return off + m * r / size_; };  // rank r's slice: [lo(r), lo(r + 1))
    auto in_buffer = [&](int r, int64_t i) { return buffer(r) + size_t(i - off) * es; };
    for (int r = 0; r < size_; ++r)
      if (r != rank_) shm_pack(pieces, es, lo(r), lo(r + 1), in_buffer(rank_, lo(r)));
    step();
    detail::by_dtype(dtype, [&]<typename T>(T*) {  // in rank order, the same bits on every rank
      std::vector<const T*> srcs(size_t(size_), nullptr);
      detail::for_each_stretch(
          pieces, es, lo(rank_), lo(rank_ + 1), [&](char* at, int64_t i, int64_t n) {
            T* mine = reinterpret_cast<T*>(at);
            for (int r = 0; r < size_; ++r)
              srcs[size_t(r)] = r == rank_ ? mine : reinterpret_cast<const T*>(in_buffer(r, i));
            detail::shm_reduce(mine, srcs.data(), size_, n, op,
                               reinterpret_cast<T*>(in_buffer(rank_, i)));
          });
    });
    step();
    for (int r = 0; r < size_; ++r)
      if (r != rank_) shm_unpack(pieces, es, lo(r), lo(r + 1), in_buffer(r, lo(r)));
    ++rounds_;
  }
}

}  // namespace tandem::parallel
