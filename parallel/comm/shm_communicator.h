// parallel/comm/shm_communicator.h — collectives between processes on one host, through POSIX
// shared memory (DeepSpeed's CPU design). Each rank owns a segment: state words (shm_segment.h)
// and two data buffers used in turn, so a rank may fill one while its peers still read the other
// and most steps need a single synchronisation. An all-reduce goes in rounds of a buffer each.
// Direct (small tensors): every rank copies its tensor in, and every rank reduces all the
// buffers (one step per round). Otherwise: every rank copies in,
// reduces its 1/N slice of all buffers in place (the reduce-scatter), then copies every rank's
// reduced slice out (the all-gather): two steps per round, and each byte is reduced once.
// Reductions go in rank order, so all ranks get the same bits. It is the default for CPU ranks on
// one host (init_process_group).
//
// Messages (send/recv) stream through a channel per ordered pair of ranks in the receiver's
// segment (shm_channel.h); a send completes once a thread of the sender's holds a copy.
//
// A rank that dies mid-collective (even by SIGKILL) makes its peers fail within a millisecond
// or so, naming it; nothing is left in /dev/shm.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <tandem/parallel/comm/shm_channel.h>
#include <tandem/parallel/comm/shm_pieces.h>
#include <tandem/parallel/comm/shm_segment.h>
#include <tandem/parallel/store/store.h>
#include <functional>
#include <memory>
#include <span>

namespace tandem::parallel {

class CollectiveQueue;

struct ShmOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// Each of a rank's two buffers: the most a round moves. Small rounds keep a round's bytes in
  /// the cores' caches while the peers read them; 4 MiB rounds went through memory and moved
  /// half as much at 4-64 MB (bench/RESULTS.md, 2026-11-26).
  size_t buffer_bytes = size_t(256) << 10;
  /// All-reduces up to this many bytes go direct (one step per round); larger ones take the
  /// reduce-scatter, whose rounds each rank reduces only 1/N of: direct was 5-15 % faster at
  /// 16 KB and 10 % slower at 64 KB (2 ranks, bench/RESULTS.md, 2026-11-26).
  size_t direct_bytes = size_t(32) << 10;
  /// A collective issued while none is queued runs in the caller's thread (collective_queue.h)
  /// when its tensor has at most `inline_max_bytes`: that saves two thread hand-offs, which is
  /// what a small collective costs. A larger one always runs on the communicator's thread, so
  /// that its caller overlaps it (DDP's buckets, fully_shard's prefetch); its hand-off is
  /// microseconds against its milliseconds.
  bool inline_when_idle = true;
  size_t inline_max_bytes = size_t(1) << 20;
  /// Each channel of point-to-point messages (shm_channel.h): its slots, and their bytes (a
  /// multiple of 64).
  detail::ShmChannelShape channel = {};
};

class ShmCommunicator : public Communicator {
 public:
  /// Creates this rank's segment and maps every peer's, meeting them through `store`.
  ShmCommunicator(std::shared_ptr<Store> store, int rank, int size, ShmOptions options = {});
  ~ShmCommunicator() override;  // delivers its sends, finishes queued collectives, then unmaps

  std::string backend() const override { return "shm"; }
  WorkPtr all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::Sum) override;
  /// Host tensors, reduced where they lie; null for a GPU's (packed into one, they are staged
  /// through the host once instead of tensor by tensor).
  WorkPtr all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::Sum) override;
  WorkPtr broadcast(Tensor& tensor, int root = 0) override;
  WorkPtr all_gather(std::vector<Tensor>& outputs, const Tensor& input) override;
  WorkPtr reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum) override;
  /// Host tensors, reduced and gathered where they lie (shm_scatter_gather.cpp); null for a
  /// GPU's, as all_reduce_coalesced.
  WorkPtr reduce_scatter_coalesced(Tensor& output, std::vector<Tensor>& inputs,
                                   ReduceOp op = ReduceOp::Sum) override;
  WorkPtr all_gather_in_place(std::vector<Tensor>& tensors, int64_t chunk) override;
  WorkPtr all_to_all(Tensor& output, const Tensor& input) override;
  /// In rounds of the buffers, as all_to_all: each round every rank writes up to a 1/N slice of
  /// its buffer for each peer, and each peer reads its slice (shm_all_to_all_v.cpp).
  WorkPtr all_to_all_v(Tensor& output, const Tensor& input,
                       const std::vector<int64_t>& output_splits,
                       const std::vector<int64_t>& input_splits) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& tensor, int dst) override;
  WorkPtr recv(Tensor& tensor, int src) override;

 protected:
  std::shared_ptr<Communicator> make_subgroup(const std::vector<int>& ranks, int index,
                                              const std::string& name) override;

 private:
  // Numbers the collective and queues run() on the worker thread; a failure marks this rank
  // failed in its state words, so its peers stop waiting for it. A template, so that run and
  // its wrapper make one closure (one allocation, not two: a small collective takes ~1 µs).
  // `make_work(seq)` makes the Work; a collective of `bytes` may run inline (ShmOptions).
  template <typename MakeWork, typename Run>
  WorkPtr enqueue_as(MakeWork make_work, size_t bytes, Run run);
  template <typename Run>
  WorkPtr enqueue(const std::string& op, const Tensor* t, const std::string& extra, Run run);
  // One synchronisation: this rank's step count goes up, then it waits for every peer's.
  void step();
  // This round's buffer of `rank` (the two buffers alternate from round to round).
  char* buffer(int rank) const;
  // The channel of messages from rank `src` to rank `dst` (in dst's segment).
  char* channel(int src, int dst) const;
  // The elements of `element_size` bytes one buffer holds, a multiple of size().
  int64_t capacity(size_t element_size) const;
  // The all-reduce of `count` elements in `pieces` (shm_all_reduce.cpp): direct up to
  // ShmOptions::direct_bytes, else reduce-scatter then all-gather.
  void all_reduce_pieces(std::span<const detail::ShmPiece> pieces, int64_t count, DType dtype,
                         ReduceOp op);
  void all_reduce_direct(std::span<const detail::ShmPiece> pieces, int64_t count, DType dtype,
                         ReduceOp op);
  void all_reduce_large(std::span<const detail::ShmPiece> pieces, int64_t count, DType dtype,
                        ReduceOp op);

  // The reduce-scatter of the array of `pieces`, padded with zeros to size() chunks of `chunk`:
  // `out` (chunk elements; it may be the array's own chunk) receives chunk rank()'s reduction.
  void reduce_scatter_pieces(std::span<const detail::ShmPiece> pieces, int64_t chunk, DType dtype,
                             ReduceOp op, char* out);
  // all_to_all_v's rounds (shm_all_to_all_v.cpp) over host tensors: rows of `per_row` elements.
  void all_to_all_v_rounds(const Tensor& host_in, Tensor& host_out,
                           const std::vector<int64_t>& send_rows,
                           const std::vector<int64_t>& recv_rows, int64_t per_row);
  // The all-gather in place of the array of `pieces`, size() chunks of `chunk`.
  void all_gather_pieces(std::span<const detail::ShmPiece> pieces, int64_t chunk, DType dtype);

  const ShmOptions options_;
  std::shared_ptr<Store> store_;
  std::vector<ShmSegment> segments_;  // segments_[r]: rank r's (this rank's own included)
  std::unique_ptr<CollectiveQueue> queue_;
  std::mutex mu_;  // orders sequence numbers with the queue
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sent_, received_;  // per peer: the numbers of point-to-point messages
  std::vector<std::unique_ptr<detail::ShmSender>> senders_;  // per peer, made at its first send
  // The worker thread's alone:
  uint32_t steps_ = 0;  // synchronisations so far
  // How long a step spins before it yields (shm_wait): none when the group's ranks outnumber
  // the cores this process may run on.
  std::chrono::microseconds spin_{20};
  uint64_t rounds_ = 0;  // buffer uses so far (its parity picks the buffer)
  std::chrono::steady_clock::time_point deadline_;  // this collective's; zero until a step is late
};

}  // namespace tandem::parallel
