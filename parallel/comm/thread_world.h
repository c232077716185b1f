// parallel/comm/thread_world.h — where the ranks of one process meet (the in-process
// communicator's rendezvous). Ranks are threads; a collective is a Meeting: each rank arrives
// with its tensors, the meeting waits for all of them, checks they called the same collective,
// and then the ranks read each other's tensors directly. Phases (sync) order the reads and writes
// inside a collective. Point-to-point messages go through mailboxes, one queue per (src, dst).
//
// A rank that fails calls abort(): every rank waiting here, or arriving later, fails at once with
// an error that names the failed rank, instead of waiting out the timeout.
#pragma once

#include <tandem/core/tensor.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::parallel {

class ThreadWorld {
 public:
  ThreadWorld(int size, std::chrono::milliseconds timeout);
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  /// One collective, shared by the ranks that take part.
  struct Meeting {
    std::vector<Tensor> inputs;      // rank i's tensor, once it has arrived
    std::vector<std::string> calls;  // what rank i called ("all_reduce sum 1000 x float32")
    std::vector<int> phase_count;    // how many ranks have reached each phase
    std::vector<Tensor> parts;       // rank i's share of the result (all_reduce's slice i)
    int left = 0;
  };

  /// Rank `rank` arrives at collective `seq` with `input` (may be undefined) and `call`
  /// (which must be the same on every rank). Returns once all ranks have arrived. Throws
  /// DistributedError naming the ranks that called something else, the ranks that did not come
  /// within the timeout (with `description`), or the rank that aborted.
  std::shared_ptr<Meeting> arrive(uint64_t seq, int rank, const Tensor& input,
                                  const std::string& call, const std::string& description);
  /// Waits until every rank of the meeting has reached phase `phase` (1, 2, ...).
  void sync(Meeting& m, int phase, const std::string& description);
  /// The rank is done with the meeting; the last one to leave forgets it.
  void leave(uint64_t seq, Meeting& m);

  /// Queues a message from `src` to `dst` (a copy: the sender may reuse its tensor at once).
  void post(int src, int dst, Tensor message);
  /// Takes the next message from `src` to `dst`, waiting for it up to the timeout.
  Tensor take(int src, int dst, const std::string& description);

  /// Rank `rank` failed with `what`: wake every waiter with an error that says so, in this world
  /// and in its sub-groups' (rank numbers are this world's).
  void abort(int rank, const std::string& what);

  /// The world of sub-group `name` (new_group), of `size` ranks: made by the first member to ask,
  /// the same object for the others.
  std::shared_ptr<ThreadWorld> subworld(const std::string& name, int size);

 private:
  void abort_because(const std::string& reason);
  // Under mu_: the world's state changed; wake the sleepers and tell the spinners (wait()).
  void changed() {
    changes_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  }
  // Waits on cv_ until `ready()` holds; throws on abort or timeout (`missing` names who is late).
  template <typename Ready, typename Missing>
  void wait(std::unique_lock<std::mutex>& lk, Ready ready, Missing missing,
            const std::string& description);

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> changes_{0};  // bumped by every changed(): what spinning waiters watch
  std::map<uint64_t, std::shared_ptr<Meeting>> meetings_;
  std::map<std::pair<int, int>, std::deque<Tensor>> mailboxes_;
  std::string aborted_;  // "rank 1 failed: ..." once a rank has failed
  std::map<std::string, std::shared_ptr<ThreadWorld>> subworlds_;
};

}  // namespace tandem::parallel
