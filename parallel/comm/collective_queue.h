// parallel/comm/collective_queue.h — a communicator's collectives in order, on one thread of
// their own. The transports' calls block (Gloo's, MPI's, a shared-memory wait), so a communicator
// queues each collective here and hands the caller a Work at once: DDP's backward keeps running
// while a bucket is reduced. A collective that throws (Gloo's IoException for a dead peer, a
// timeout) becomes a DistributedError naming the backend, the collective, its sequence number,
// the seconds it ran and, when the store knows, which rank died. After a failure the group is
// broken: every later collective fails at once with the first error.
#pragma once

#include <tandem/core/cuda_device.h>
#include <tandem/parallel/comm/communicator.h>
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
  /// `departed_ranks`, if given, names the ranks known to have died, for a failure's message.
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
  void loop();
  void execute(Task& task);  // runs it and completes its Work; called with busy_ set
  std::exception_ptr failure(const Task& task, const std::exception& e, double seconds) const;

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
  std::thread thread_;
};

}  // namespace tandem::parallel
