// parallel/comm/shm_all_to_all_v.cpp — the all-to-all of unequal parts over shared memory. Each
// round, every rank writes the next piece of its part for rank j (up to a 1/N slice of its
// buffer) into slice j, steps, and reads its own slice of every rank's buffer: the same rounds as
// all_to_all, with each pair's piece cut to what is left of its part. The ranks agree on the
// number of rounds first (the largest part anyone sends, a one-number all-reduce), since every
// round is a step they all take.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <algorithm>

namespace tandem::parallel {

using ::tandem::parallel::detail::shm_copy;

void ShmCommunicator::all_to_all_v_rounds(const Tensor& host_in, Tensor& host_out,
                                          const std::vector<int64_t>& send_rows,
                                          const std::vector<int64_t>& recv_rows, int64_t per_row) {
  const size_t es = element_size(host_in.dtype());
  // Each pair's part in elements, and where it starts.
  std::vector<int64_t> send_n, send_at, recv_n, recv_at;
  int64_t a = 0, b = 0, largest = 0;
  for (int r = 0; r < size_; ++r) {
    send_n.push_back(send_rows[size_t(r)] * per_row), send_at.push_back(a), a += send_n.back();
    recv_n.push_back(recv_rows[size_t(r)] * per_row), recv_at.push_back(b), b += recv_n.back();
    largest = std::max({largest, send_n.back(), recv_n.back()});
  }
  // Every rank takes the same rounds: as many as the largest part anyone sends needs.
  const detail::ShmPiece most{reinterpret_cast<char*>(&largest), 1};
  all_reduce_pieces({&most, 1}, 1, DType::i64, ReduceOp::Max);
  const int64_t piece = capacity(es) / size_;
  const char* in = static_cast<const char*>(host_in.data_ptr());
  char* out = static_cast<char*>(host_out.data_ptr());
  for (int64_t off = 0; off < largest; off += piece) {
    for (int j = 0; j < size_; ++j) {
      const int64_t m = std::clamp<int64_t>(send_n[size_t(j)] - off, 0, piece);
      shm_copy(buffer(rank_) + size_t(j * piece) * es, in + size_t(send_at[size_t(j)] + off) * es,
               size_t(m) * es);
    }
    step();
    for (int r = 0; r < size_; ++r) {  // rank r's piece for this rank
      const int64_t m = std::clamp<int64_t>(recv_n[size_t(r)] - off, 0, piece);
      shm_copy(out + size_t(recv_at[size_t(r)] + off) * es, buffer(r) + size_t(rank_ * piece) * es,
               size_t(m) * es);
    }
    ++rounds_;
  }
}

}  // namespace tandem::parallel
