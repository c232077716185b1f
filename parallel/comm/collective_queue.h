// parallel/comm/collective_queue.h — a communicator's collectives in order, on one thread of
// their own. The transports' calls block (Gloo's, MPI's, a shared-memory wait), so a communicator
// queues each collective here and hands the caller a Work at once: DDP's backward keeps running
// while a bucket is reduced. A collective that throws (Gloo's IoException for a dead peer, a
// timeout) becomes a DistributedError naming the backend, the collective, its sequence number,
// the seconds it ran and, when the store knows, which rank died. After a failure the group is
// broken: every later collective fails at once with the first error.
//
// With `departed_ranks`, a watchdog also asks the store, every 250 ms once a collective has run
// for a second, whether a peer has gone, and when two looks in a row say so it fails that
// collective's Work and the queued ones at once. Gloo needs it: its TCP transport wakes the
// sends and receives still queued on a pair whose peer died, but not one already on the wire
// (Pair::signalException skips them), so a rank waiting on such a transfer sat out the whole
// timeout (seen in CI once in ~10 runs). The transport's call itself still returns only at its
// timeout, and the destructor waits for it: Gloo has no way to abort one.
#pragma once

#include <tandem/core/cuda_device.h>
#include <tandem/parallel/comm/communicator.h>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem::parallel {

class CollectiveQueue {
 public:
  /// Starts the thread (with SIGPIPE blocked: gloo_rendezvous.h). `backend` prefixes errors;
  /// `departed_ranks`, if given, names the ranks known to have died, for a failure's message and
  /// for the watchdog.
  /// With `inline_when_idle`, a collective pushed while nothing is queued or running runs at
  /// once in the caller's thread, which saves two thread hand-offs (microseconds, which is what a
  /// small collective over shared memory takes) at the price of blocking the caller until it is
  /// done: the Work is complete when push returns.
  /// `progress`, if given, is called on the worker every 100 µs while it returns true and no
  /// task is queued (MPI needs its caller to keep sends in flight moving), and the destructor
  /// waits until it returns false.
  CollectiveQueue(std::string backend, int rank,
                  std::function<std::vector<int64_t>()> departed_ranks = {},
                  bool inline_when_idle = false, std::function<bool()> progress = {});
  /// Finishes the queued collectives, then stops the thread.
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  /// Runs run(tag) after the collectives queued before it, then completes `work` (with the
  /// error, if it threw).
  /// `may_inline` false: never in the caller's thread, even when idle (a large collective, which
  /// its caller means to overlap).
  void push(WorkPtr work, std::function<void(uint32_t tag)> run, uint32_t tag,
            bool may_inline = true);

 private:
  struct Task {
    WorkPtr work;
    std::function<void(uint32_t)> run;
    uint32_t tag;
    cuda::StreamFence fence;  // the caller's streams at push, for a task run by the worker
  };
  using Clock = std::chrono::steady_clock;
  void loop();
  void execute(Task& task);           // runs it and completes its Work; called with busy_ set
  void watch();                       // the watchdog's thread
  void started(const WorkPtr& work);  // with mutex_ held: the watchdog's view of what runs
  bool broken();
  // The error of `work`: what went wrong, after how long, and the ranks that have gone.
  std::exception_ptr error(const Work& work, const std::string& what, double seconds,
                           const std::string& departed) const;
  std::exception_ptr failure(const Task& task, const std::exception& e, double seconds) const;
  std::string departed_peers() const;  // "1" or "1, 3"; "" while none

  const std::string backend_;
  const int rank_;
  const std::function<std::vector<int64_t>()> departed_ranks_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Task> queue_;
  const bool inline_when_idle_;
  const std::function<bool()> progress_;
  bool pending_ = false;  // progress() said there is more to do
  bool stop_ = false;
  bool busy_ = false;          // a task is running (on the worker or inline): the next one waits
  std::exception_ptr broken_;  // the first failure; the group is unusable after it
  WorkPtr running_;            // the collective running now (with a watchdog only)
  Clock::time_point running_since_;
  bool watch_stop_ = false;
  std::condition_variable watch_wake_;
  std::thread thread_;
  std::thread watchdog_;
};

}  // namespace tandem::parallel
