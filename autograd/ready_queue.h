// autograd/ready_queue.h — where backward's runnable nodes wait, and the threads that run them.
// Each device other than the plain `cpu` (cpu:N for N ≥ 1, cuda:N) has one long-lived backward
// worker thread with its own queue, started on first use; nodes on `cpu` run on the thread that
// called backward, from that thread's own queue. Nodes come out latest-recorded first (the
// highest sequence number), after wake-ups for a waiting caller.
#pragma once

#include <tandem/autograd/graph_task.h>
#include <tandem/core/device.h>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

namespace tandem {

class ReadyQueue {
 public:
  void push(NodeTask task);
  /// Blocks until something is queued.
  NodeTask pop();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::vector<NodeTask> heap_;
};

/// The queue of `device`'s backward worker (cpu:N with N ≥ 1, or cuda:N), started on first use.
std::shared_ptr<ReadyQueue> device_queue(Device device);

/// The calling thread's queue: its device's on a backward worker, else one of its own.
std::shared_ptr<ReadyQueue> local_queue();

/// A backward worker's loop (engine.cpp): runs what `queue` gives it, for ever.
[[noreturn]] void run_backward_worker(Device device, const std::shared_ptr<ReadyQueue>& queue);

}  // namespace tandem
