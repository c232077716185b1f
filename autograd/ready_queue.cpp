// autograd/ready_queue.cpp — the ready queues and the per-device backward worker threads.
#include <pthread.h>
#include <tandem/autograd/ready_queue.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <algorithm>
#include <string>
#include <thread>
#include <unordered_map>

namespace tandem {
namespace {

// Heap order: wake-ups first, then the latest-recorded node. A worker drains its queue in this
// order, so within one device the nodes of a task run as on one thread.
bool runs_later(const NodeTask& a, const NodeTask& b) {
  if (!a.task || !b.task) return a.task && !b.task;
  return a.node->sequence_nr < b.node->sequence_nr;
}

thread_local std::shared_ptr<ReadyQueue> t_queue;

// The workers live as long as the process: they are detached and their registry is never
// destroyed, so no exit-time destructor can join a thread that is blocked on its queue.
struct Workers {
  std::mutex mutex;
  std::unordered_map<Device, std::shared_ptr<ReadyQueue>> queues;
};
Workers* g_workers = new Workers;

// A forked child (parallel::spawn) has only the forking thread: the workers are gone, so the
// child forgets them (leaking the registry, whose queues a dead worker may have locked) and
// starts new ones on first use. Holding the registry's lock across the fork keeps it consistent.
void before_fork() { g_workers->mutex.lock(); }
void after_fork_parent() { g_workers->mutex.unlock(); }
void after_fork_child() {
  g_workers->mutex.unlock();  // locked by this same thread in before_fork
  g_workers = new Workers;
  t_queue = nullptr;  // the forking thread's own queue may be mid-use by a dead worker
}
[[maybe_unused]] const int g_atfork =
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);

}  // namespace

void ReadyQueue::push(NodeTask task) {
  {
    std::lock_guard lk(mutex_);
    heap_.push_back(std::move(task));
    std::push_heap(heap_.begin(), heap_.end(), runs_later);
  }
  ready_.notify_one();
}

NodeTask ReadyQueue::pop() {
  std::unique_lock lk(mutex_);
  ready_.wait(lk, [&] { return !heap_.empty(); });
  std::pop_heap(heap_.begin(), heap_.end(), runs_later);
  NodeTask task = std::move(heap_.back());
  heap_.pop_back();
  return task;
}

std::shared_ptr<ReadyQueue> device_queue(Device device) {
  TD_INTERNAL_ASSERT(!(device.is_cpu() && device.index() == 0),
                     "the plain cpu device has no backward worker");
  Workers& w = *g_workers;
  std::lock_guard lk(w.mutex);
  auto& queue = w.queues[device];
  if (!queue) {
    queue = std::make_shared<ReadyQueue>();
    std::thread worker([device, queue] {
      t_queue = queue;
      trace::set_thread_name("backward " + device.str());
      run_backward_worker(device, queue);
    });
    // Named, so that top -H, gdb and the trace show which device a thread works for.
    pthread_setname_np(worker.native_handle(), ("tandem-bw-" + device.str()).substr(0, 15).c_str());
    worker.detach();
  }
  return queue;
}

std::shared_ptr<ReadyQueue> local_queue() {
  if (!t_queue) t_queue = std::make_shared<ReadyQueue>();
  return t_queue;
}

}  // namespace tandem
