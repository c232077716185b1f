// parallel/comm/shm_channel.h — point-to-point messages between two ranks on one host. For each
// ordered pair, a channel of a few slots in the receiver's segment, which the sender fills and
// the receiver drains; each side counts the slots it has done in a word of its own, so each
// writes only its own count and waits on the other's, as a collective's step waits on a peer's:
//
//   channel in rank d's segment, for messages from rank s (K = 4 slots)
//   ┌─────────┬──────┬──────────┬──────────┬────────┬────────┬────────┬────────┐
//   │ written │ read │ sleepers │ sleepers │ slot 0 │ slot 1 │ slot 2 │ slot 3 │
//   └─────────┴──────┴──────────┴──────────┴────────┴────────┴────────┴────────┘
//     s counts  d counts                     a message: [length | bytes ...] over the slots it
//                                            takes, from slot written mod K on
//
// The sender fills slot `written mod K` once written − read < K; the receiver empties slot
// `read mod K` once read < written. A message larger than the channel streams through it, the
// two sides copying different slots at the same time. A send hands a copy of its bytes to a
// thread of the sender's, one per destination (ShmSender), which streams them while the caller
// goes on: a send completes when its bytes are copied (MPI's buffered send), so two ranks that
// each send to the other before they receive do not wait for each other.
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/parallel/comm/shm_segment.h>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::parallel::detail {

struct ShmChannelHeader {
  alignas(64) std::atomic<uint32_t> written;          // slots the sender has filled
  alignas(64) std::atomic<uint32_t> read;             // slots the receiver has emptied
  alignas(64) std::atomic<uint32_t> reader_sleepers;  // the receiver, asleep on `written`
  alignas(64) std::atomic<uint32_t> writer_sleepers;  // the sender, asleep on `read`
};

/// A channel's slots: K of `slot_bytes` (4 × 32 KiB: a stream of 32 KiB copies, while the sizes
/// of the segments stay small for meshes of many sub-groups).
struct ShmChannelShape {
  size_t slots = 4;
  size_t slot_bytes = size_t(32) << 10;
  size_t bytes() const { return sizeof(ShmChannelHeader) + slots * slot_bytes; }
};

/// Writes one message of `n` bytes into `channel` (whose memory started zeroed), waiting for
/// room; `receiver`'s state words tell of its failure. kReached once it is all in.
ShmWait channel_write(char* channel, const ShmChannelShape& shape, const void* data, uint64_t n,
                      const ShmHeader& receiver, std::chrono::milliseconds timeout);

/// Reads the next message of `channel` into `out` (room for `n` bytes), waiting for it; `given`
/// is the length the sender wrote. A message of another length is drained whole (the channel
/// stays in step) and only what fits is copied: the caller reports the mismatch.
ShmWait channel_read(char* channel, const ShmChannelShape& shape, void* out, uint64_t n,
                     uint64_t& given, const ShmHeader& sender, std::chrono::milliseconds timeout);

/// "rank 1 (pid 4242) died", "rank 1 gave up on the group after an error", or that it did not
/// `what` within the timeout: why a wait on rank `rank` ended without what it waited for.
std::string shm_wait_failure(ShmWait result, int rank, const ShmHeader& peer,
                             const std::string& what, std::chrono::milliseconds timeout);

/// The sending side of one channel: a thread that writes the messages posted to it, in order.
class ShmSender {
 public:
  ShmSender(char* channel, ShmChannelShape shape, const ShmHeader& receiver, int receiver_rank,
            std::chrono::milliseconds timeout);
  /// Delivers what was posted first (giving up on a receiver that failed, died or timed out),
  /// then joins the thread.
  ~ShmSender();
  ShmSender(const ShmSender&) = delete;
  ShmSender& operator=(const ShmSender&) = delete;

  /// Queues `message` (a contiguous host tensor nobody else writes: the caller's copy) for the
  /// thread. DistributedError naming the receiver when an earlier message could not be
  /// delivered: what was posted after it is dropped.
  void post(Tensor message);

 private:
  void run();

  char* channel_;
  const ShmChannelShape shape_;
  const ShmHeader& receiver_;
  const int receiver_rank_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Tensor> queue_;
  std::string failure_;  // non-empty: why a message could not be delivered
  bool closing_ = false;
  std::thread thread_;
};

}  // namespace tandem::parallel::detail
