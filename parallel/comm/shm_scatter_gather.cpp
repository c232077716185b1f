// parallel/comm/shm_scatter_gather.cpp — the shared-memory reduce-scatter and in-place all-gather
// over an array of pieces (shm_pieces.h). Both move only what other ranks need through shared
// memory: the reduce-scatter copies out the peers' chunks and reduces its own straight from its
// pieces; the all-gather copies in its own chunk and writes the peers' straight into its pieces.
// So ZeRO's bucket costs what DDP's all-reduce costs: each element written once on the way out
// (shared memory) and once on the way in (the chunk, or the parameters).
//
//   reduce-scatter, rank 1 of 3, one round     in-place all-gather, rank 1 of 3, one round
//   pieces  [ c0 | c1 | c2 ]                   pieces [ c0 | c1 | c2 ]
//   buffer  [ c0 |    | c2 ]   (copied out)    buffer [ c1 ]   (copied out)
//   step: every rank has written               step: every rank has written
//   out  =  peer0.buffer[c1] + pieces[c1]      pieces[c0] = peer0.buffer, pieces[c2] = peer2's
//          + peer2.buffer[c1], in rank order
#include <tandem/parallel/comm/dtype_dispatch.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <array>
#include <vector>

namespace tandem::parallel {

using detail::ShmPiece;

void ShmCommunicator::reduce_scatter_pieces(std::span<const ShmPiece> pieces, int64_t chunk,
                                            DType dtype, ReduceOp op, char* out) {
  const size_t es = element_size(dtype);
  const int64_t total = detail::total_count(pieces);
  const int64_t piece = capacity(es) / size_;  // of every chunk, per round
  for (int64_t off = 0; off < chunk; off += piece) {
    const int64_t m = std::min(piece, chunk - off);
    // The round's piece of every peer's chunk, side by side (this rank's own place left empty).
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        detail::shm_pack(pieces, es, j * chunk + off, j * chunk + off + m,
                         buffer(rank_) + size_t(j * m) * es);
    step();
    const int64_t lo = rank_ * chunk + off, hi = lo + m;  // this round's part of this rank's chunk
    detail::by_dtype(dtype, [&]<typename T>(T*) {
      std::array<const T*, 8> few;  // the sources on the stack up to 8 ranks
      std::vector<const T*> many(size_ > 8 ? size_t(size_) : 0);
      const T** srcs = size_ > 8 ? many.data() : few.data();
      detail::for_each_stretch(pieces, es, lo, hi, [&](char* at, int64_t i, int64_t n) {
        for (int r = 0; r < size_; ++r)
          srcs[r] = r == rank_ ? reinterpret_cast<const T*>(at)
                               : reinterpret_cast<const T*>(buffer(r)) + rank_ * m + (i - lo);
        detail::shm_reduce(reinterpret_cast<T*>(out) + off + (i - lo), srcs, size_, n, op);
      });
    });
    // Past the array's end every rank's chunk is padding, zeros, and so is their reduction.
    const int64_t end = std::clamp(total, lo, hi);
    if (end < hi) std::memset(out + size_t(off + end - lo) * es, 0, size_t(hi - end) * es);
    ++rounds_;
  }
}

void ShmCommunicator::all_gather_pieces(std::span<const ShmPiece> pieces, int64_t chunk,
                                        DType dtype) {
  const size_t es = element_size(dtype);
  const int64_t cap = capacity(es);
  for (int64_t off = 0; off < chunk; off += cap) {
    const int64_t m = std::min(cap, chunk - off);
    detail::shm_pack(pieces, es, rank_ * chunk + off, rank_ * chunk + off + m, buffer(rank_));
    step();
    for (int r = 0; r < size_; ++r)
      if (r != rank_)
        detail::shm_unpack(pieces, es, r * chunk + off, r * chunk + off + m, buffer(r));
    ++rounds_;
  }
}

}  // namespace tandem::parallel
