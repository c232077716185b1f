// parallel/comm/shm_segment.h — one rank's window of POSIX shared memory (shm_open + mmap), and
// the state words at its head through which ranks on one host synchronise without a barrier
// object: each rank counts the steps it has reached (`arrived`), and a rank that needs a peer's
// step N reads the peer's count, spinning for a few microseconds and then sleeping on it with a
// futex (the word lives in shared memory, so the futex works across processes).
//
// A segment's name is removed (unlink) as soon as every rank has mapped it: the memory lives
// only as long as a mapping does, so a rank killed with SIGKILL leaves nothing in /dev/shm.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::parallel {

/// The state words one rank publishes, at the start of its segment (one cache line each, so a
/// rank spinning on one word does not slow the writer of another).
struct ShmHeader {
  alignas(64) std::atomic<uint32_t> arrived;   // steps this rank has reached
  alignas(64) std::atomic<uint32_t> sleepers;  // peers sleeping on `arrived` (wake them)
  alignas(64) std::atomic<uint32_t> failed;    // nonzero: this rank gave up on the group
  alignas(64) int32_t pid;                     // to tell a dead peer from a slow one
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

class ShmSegment {
 public:
  static constexpr size_t kHeaderBytes = 4096;

  /// Creates a new segment `name` ("/tandem-…") of kHeaderBytes + data_bytes, owned by this
  /// process (DistributedError naming /dev/shm when it cannot, e.g. when /dev/shm is full).
  static ShmSegment create(const std::string& name, size_t data_bytes);
  /// Maps a peer's existing segment.
  static ShmSegment open(const std::string& name, size_t data_bytes);
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps; removes the name too if this process created it and has not yet

  /// Removes the name from /dev/shm; the mapping stays valid.
  void unlink();
  ShmHeader& header() const { return *static_cast<ShmHeader*>(base_); }
  char* data() const { return static_cast<char*>(base_) + kHeaderBytes; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  bool owns_name_ = false;
};

/// Marks one more step reached on `mine` and wakes the peers sleeping on it.
void shm_arrive(ShmHeader& mine);

/// Marks this rank failed and wakes the peers sleeping on it (they see `failed` and give up).
void shm_fail(ShmHeader& mine);

/// How a wait for a peer's step ended.
enum class ShmWait {
  kReached,   // the peer reached the step
  kFailed,    // the peer marked itself failed (shm_fail)
  kDied,      // the peer's process is gone
  kTimedOut,  // the deadline passed first
};

/// Waits until `peer` has reached step `step` (counts wrap: compared modulo 2^32). Every
/// millisecond the wait checks the peer's `failed` word, whether its process is alive, and
/// `deadline`, and gives up on the first that says so. A default (zero) `deadline` is set to
/// `timeout` from the moment a step is first late, so a collective reads the clock only if it
/// has to wait (each read is a few percent of a 4 KB collective).
/// It spins `spin` before it yields the core between checks: 20 µs, or none where the ranks
/// outnumber the cores (a spinning rank would hold the core its peer needs to arrive).
ShmWait shm_wait(const ShmHeader& peer, uint32_t step,
                 std::chrono::steady_clock::time_point& deadline, std::chrono::milliseconds timeout,
                 std::chrono::microseconds spin = std::chrono::microseconds(20));
/// The same wait on any count in shared memory that `peer` advances (a message channel's,
/// shm_channel.h): until `word` reaches `target`, sleeping on it counted in `sleepers` (which
/// the advancing side reads to know whether to wake anyone: shm_wake).
ShmWait shm_wait(const std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers,
                 uint32_t target, const ShmHeader& peer,
                 std::chrono::steady_clock::time_point& deadline, std::chrono::milliseconds timeout,
                 std::chrono::microseconds spin = std::chrono::microseconds(20));
/// Wakes whoever sleeps on `word` (when `sleepers` says anyone does), after it advanced.
void shm_wake(std::atomic<uint32_t>& word, const std::atomic<uint32_t>& sleepers);

/// True while process `pid` exists and is not a zombie.
bool process_alive(int pid);

}  // namespace tandem::parallel
