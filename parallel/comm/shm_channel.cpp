// parallel/comm/shm_channel.cpp — a message streamed through a channel's slots, and the sender's
// thread per destination.
#include <tandem/core/check.h>
#include <tandem/parallel/comm/shm_channel.h>
#include <tandem/parallel/comm/shm_reduce.h>
#include <algorithm>
#include <cstring>

namespace tandem::parallel::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kLengthBytes = sizeof(uint64_t);  // each message's first slot starts with it

ShmChannelHeader& header_of(char* channel) { return *reinterpret_cast<ShmChannelHeader*>(channel); }
char* slot(char* channel, const ShmChannelShape& shape, uint32_t count) {
  return channel + sizeof(ShmChannelHeader) + (count % shape.slots) * shape.slot_bytes;
}

}  // namespace

ShmWait channel_write(char* channel, const ShmChannelShape& shape, const void* data, uint64_t n,
                      const ShmHeader& receiver, std::chrono::milliseconds timeout) {
  ShmChannelHeader& h = header_of(channel);
  const char* from = static_cast<const char*>(data);
  uint32_t written = h.written.load(std::memory_order_relaxed);  // this side's own count
  Clock::time_point deadline{};
  uint64_t done = 0;
  for (bool first = true; first || done < n; first = false) {
    // Room once read > written − K: the receiver has emptied the slot this one reuses.
    const ShmWait room = shm_wait(h.read, h.writer_sleepers, written - uint32_t(shape.slots) + 1,
                                  receiver, deadline, timeout);
    if (room != ShmWait::kReached) return room;
    char* s = slot(channel, shape, written);
    const size_t at = first ? kLengthBytes : 0;
    if (first) std::memcpy(s, &n, kLengthBytes);
    const size_t piece = size_t(std::min<uint64_t>(shape.slot_bytes - at, n - done));
    shm_copy(s + at, from + done, piece);
    done += piece;
    h.written.store(++written, std::memory_order_seq_cst);  // publishes the slot
    shm_wake(h.written, h.reader_sleepers);
  }
  return ShmWait::kReached;
}

ShmWait channel_read(char* channel, const ShmChannelShape& shape, void* out, uint64_t n,
                     uint64_t& given, const ShmHeader& sender, std::chrono::milliseconds timeout) {
  ShmChannelHeader& h = header_of(channel);
  char* to = static_cast<char*>(out);
  uint32_t read = h.read.load(std::memory_order_relaxed);
  Clock::time_point deadline{};
  uint64_t done = 0, length = 0;
  for (bool first = true; first || done < length; first = false) {
    const ShmWait filled =
        shm_wait(h.written, h.reader_sleepers, read + 1, sender, deadline, timeout);
    if (filled != ShmWait::kReached) return filled;
    const char* s = slot(channel, shape, read);
    const size_t at = first ? kLengthBytes : 0;
    if (first) std::memcpy(&length, s, kLengthBytes), given = length;
    const size_t piece = size_t(std::min<uint64_t>(shape.slot_bytes - at, length - done));
    if (done < n) shm_copy(to + done, s + at, size_t(std::min<uint64_t>(piece, n - done)));
    done += piece;
    h.read.store(++read, std::memory_order_seq_cst);  // the slot is the sender's again
    shm_wake(h.read, h.writer_sleepers);
  }
  return ShmWait::kReached;
}

std::string shm_wait_failure(ShmWait result, int rank, const ShmHeader& peer,
                             const std::string& what, std::chrono::milliseconds timeout) {
  if (result == ShmWait::kDied) return str("rank ", rank, " (pid ", peer.pid, ") died");
  if (result == ShmWait::kFailed) return str("rank ", rank, " gave up on the group after an error");
  return str("rank ", rank, " did not ", what, " within ", double(timeout.count()) / 1000.0,
             " s (timeout)");
}

ShmSender::ShmSender(char* channel, ShmChannelShape shape, const ShmHeader& receiver,
                     int receiver_rank, std::chrono::milliseconds timeout)
    : channel_(channel),
      shape_(shape),
      receiver_(receiver),
      receiver_rank_(receiver_rank),
      timeout_(timeout),
      thread_([this] { run(); }) {}

ShmSender::~ShmSender() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ShmSender::post(Tensor message) {
  {
    std::lock_guard lk(mu_);
    TD_CHECK_AS(DistributedError, failure_.empty(), failure_);
    queue_.push_back(std::move(message));
  }
  cv_.notify_all();
}

void ShmSender::run() {
  for (;;) {
    Tensor message;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) return;  // closing, and everything delivered
      message = queue_.front();
    }
    const ShmWait result = channel_write(channel_, shape_, message.data_ptr(),
                                         uint64_t(message.nbytes()), receiver_, timeout_);
    std::lock_guard lk(mu_);
    queue_.pop_front();
    if (result != ShmWait::kReached) {
      failure_ =
          str("shm send to rank ", receiver_rank_, ": ",
              shm_wait_failure(result, receiver_rank_, receiver_, "take the message", timeout_),
              "; the messages sent to it since were dropped");
      queue_.clear();
    }
  }
}

}  // namespace tandem::parallel::detail
