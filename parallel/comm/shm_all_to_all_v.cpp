// parallel/comm/shm_all_to_all_v.cpp — the all-to-all of unequal parts over shared memory. Each
// round, every rank writes the next piece of its part for rank j (up to a 1/N slice of its
// buffer) into slice j, steps, and reads its own slice of every rank's buffer: the same rounds as
// all_to_all, with each pair's piece cut to what is left of its part.
//
// Every round is a step all ranks take, so they need the same number of rounds: as many as the
// largest part of any pair. Each rank knows its own pairs' parts only; it writes their largest in
// the head of its buffer with the first round's pieces, and after that round's step reads every
// rank's: the global largest arrives with the data, and a call whose parts all fit one round
// (the common small one) takes one synchronisation, as MPI_Alltoallv's eager sends do, not an
// all-reduce of the sizes and then a round. A rank's part for itself goes straight from its input
// to its output, not through its buffer.
//
//   buffer of rank i:  [largest part of i's pairs | piece for 0 | piece for 1 | ... | piece for
//   N-1]
#include <tandem/core/check.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <algorithm>
#include <cstring>

namespace tandem::parallel {

using ::tandem::parallel::detail::shm_copy;

void ShmCommunicator::all_to_all_v_rounds(const Tensor& host_in, Tensor& host_out,
                                          const std::vector<int64_t>& send_rows,
                                          const std::vector<int64_t>& recv_rows, int64_t per_row) {
  const size_t es = element_size(host_in.dtype());
  // Each pair's part in elements, and where it starts (one allocation: at 4 KB a call's
  // allocations are a measurable share of its microsecond).
  const size_t n = size_t(size_);
  std::vector<int64_t> parts(4 * n);
  int64_t* send_n = parts.data();
  int64_t *send_at = send_n + n, *recv_n = send_at + n, *recv_at = recv_n + n;
  int64_t a = 0, b = 0, mine = 0;
  for (size_t r = 0; r < n; ++r) {
    send_n[r] = send_rows[r] * per_row, send_at[r] = a, a += send_n[r];
    recv_n[r] = recv_rows[r] * per_row, recv_at[r] = b, b += recv_n[r];
  }
  const char* in = static_cast<const char*>(host_in.data_ptr());
  char* out = static_cast<char*>(host_out.data_ptr());
  const size_t self = size_t(rank_);  // its part's sizes are equal (check_all_to_all_v)
  shm_copy(out + size_t(recv_at[self]) * es, in + size_t(send_at[self]) * es,
           size_t(send_n[self]) * es);
  send_n[self] = recv_n[self] = 0;
  for (size_t r = 0; r < n; ++r) mine = std::max({mine, send_n[r], recv_n[r]});
  constexpr size_t kHead = 64;  // the largest part, on a cache line of its own
  const int64_t piece = int64_t((options_.buffer_bytes - kHead) / es) / size_;
  int64_t largest = mine;  // until the first round's heads are read: this rank's pairs'
  for (int64_t off = 0; off == 0 || off < largest; off += piece) {
    char* own = buffer(rank_);
    std::memcpy(own, &mine, sizeof mine);
    for (int j = 0; j < size_; ++j) {
      const int64_t m = std::clamp<int64_t>(send_n[j] - off, 0, piece);
      shm_copy(own + kHead + size_t(j * piece) * es, in + size_t(send_at[j] + off) * es,
               size_t(m) * es);
    }
    step();
    for (int r = 0; r < size_; ++r) {  // rank r's piece for this rank
      if (off == 0) {
        int64_t theirs = 0;
        std::memcpy(&theirs, buffer(r), sizeof theirs);
        largest = std::max(largest, theirs);
      }
      const int64_t m = std::clamp<int64_t>(recv_n[r] - off, 0, piece);
      shm_copy(out + size_t(recv_at[r] + off) * es, buffer(r) + kHead + size_t(rank_ * piece) * es,
               size_t(m) * es);
    }
    ++rounds_;
  }
}

}  // namespace tandem::parallel
