// autograd/device_workers.h — Tandem's own threads, one mechanism for all of them. A
// DeviceWorkers is a set of long-lived threads, one per key (a device, or a device and a pipeline
// stage), each started on first use with its device current and serving one WorkQueue. Three sets
// use it: the backward workers of the engine (one per device other than the plain `cpu`, whose
// nodes run on the thread that called backward), DataParallel's replica threads (one per device),
// and each Pipeline's stage threads (one per stage: two stages on one device both make progress).
// docs/threads.md draws all of Tandem's threads.
//
//   DeviceWorkers workers("pp");
//   workers.run(keys, [&](size_t k) { stage_loop(k); });  // on every key's thread at once; waits
//
// run() is the fan-out: it hands fn(k) to keys[k]'s thread for every k, under the caller's
// ThreadLocalState (grad mode, autocast, streams, ...) and with each thread's share of the
// caller's intra-op threads (the threads compute side by side: two on two cores take one core
// each), and waits for all. The first exception in key order is re-thrown, its type kept, after
// every thread has finished, so nothing is left running. A thread of a set that calls run() on
// the same set (DataParallel inside DataParallel) runs the work itself, one key after another.
//
// Fork: a child process (parallel::spawn) has only the forking thread. Every set forgets its
// threads in the child (leaking them, as their queues may be mid-use) and starts new ones on first
// use there.
#pragma once

#include <tandem/core/device.h>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem {

/// Jobs waiting for one thread. They come out highest priority first, in the order they were
/// pushed among equals; wake-ups (empty jobs, for a thread waiting on its own queue) before all.
class WorkQueue {
 public:
  using Job = std::function<void()>;
  void push(Job job, uint64_t priority = 0);
  /// An empty job: the thread waiting in pop() returns it and looks at its state again.
  void wake();
  /// Blocks until something is queued.
  Job pop();

 private:
  struct Item {
    Job job;
    uint64_t priority, order;
    bool wake;
  };
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<Item> heap_;
  uint64_t pushed_ = 0;
};

/// Which thread of a set: its device, and an index to tell apart threads of one device.
struct WorkerKey {
  Device device;
  int index = 0;
  bool operator==(const WorkerKey&) const = default;
};

class DeviceWorkers {
 public:
  /// Threads named "td-<role>-<device>[/<index>]" (top -H, gdb and the trace show them);
  /// `on_start`, if given, runs first on each new thread (the engine's remembers the queue).
  explicit DeviceWorkers(
      std::string role,
      std::function<void(const WorkerKey&, std::shared_ptr<WorkQueue>)> on_start = nullptr);
  /// Stops and joins the threads (after the jobs they were given). A set meant to live as long as
  /// the process is never destroyed, so no exit-time destructor waits for a busy thread.
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  /// The queue of `key`'s thread, started now if it was not running.
  std::shared_ptr<WorkQueue> queue(const WorkerKey& key);

  /// fn(k) on keys[k]'s thread for every k, as described above. `where(k)` names key k in an
  /// error ("replica 1 on cpu:1"); null: errors pass unchanged.
  void run(const std::vector<WorkerKey>& keys, const std::function<void(size_t)>& fn,
           const std::function<std::string(size_t)>& where = nullptr);

  /// Whether the calling thread is one of this set's.
  bool on_worker() const;

  /// Stops and joins the threads of every set alive (after the jobs they were given); each set
  /// starts them again on first use. parallel::spawn calls it before it forks.
  static void release_all_threads();

  struct State;  // the threads and their queues (device_workers.cpp)

 private:
  std::string role_;
  std::function<void(const WorkerKey&, std::shared_ptr<WorkQueue>)> on_start_;
  std::shared_ptr<State> state_;
};

}  // namespace tandem
