// autograd/device_workers.cpp — the queues, the threads, the fan-out, and what a fork leaves.
#include <pthread.h>
#include <tandem/autograd/device_workers.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/error.h>
#include <tandem/core/thread_pool.h>
#include <tandem/core/trace.h>
#include <algorithm>
#include <exception>
#include <thread>

namespace tandem {

// ---- WorkQueue

namespace {
// Heap order: wake-ups first, then the highest priority, then the earliest pushed.
template <typename Item>
bool comes_later(const Item& a, const Item& b) {
  if (a.wake != b.wake) return b.wake;
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.order > b.order;
}
}  // namespace

void WorkQueue::push(Job job, uint64_t priority) {
  {
    std::lock_guard lk(mutex_);
    heap_.push_back({std::move(job), priority, pushed_++, false});
    std::push_heap(heap_.begin(), heap_.end(), comes_later<Item>);
  }
  ready_.notify_one();
}

void WorkQueue::wake() {
  {
    std::lock_guard lk(mutex_);
    heap_.push_back({nullptr, 0, pushed_++, true});
    std::push_heap(heap_.begin(), heap_.end(), comes_later<Item>);
  }
  ready_.notify_one();
}

WorkQueue::Job WorkQueue::pop() {
  std::unique_lock lk(mutex_);
  ready_.wait(lk, [&] { return !heap_.empty(); });
  std::pop_heap(heap_.begin(), heap_.end(), comes_later<Item>);
  Job job = std::move(heap_.back().job);
  heap_.pop_back();
  return job;
}

// ---- the threads

struct DeviceWorkers::State {
  struct Thread {
    WorkerKey key;
    std::shared_ptr<WorkQueue> queue;
    std::thread* thread;
  };
  std::mutex mutex;
  std::vector<Thread> threads;
};

namespace {

thread_local const DeviceWorkers::State* t_set = nullptr;  // the set this thread belongs to
thread_local bool t_stop = false;                          // set by the destructor's last job

// Every set alive, so that a fork can make each forget its threads. Immortal, like the sets that
// live as long as the process.
struct Registry {
  std::mutex mutex;
  std::vector<std::weak_ptr<DeviceWorkers::State>> sets;
};
Registry* g_registry = new Registry;

// The sets locked across a fork, held so that none is destroyed with its mutex locked.
auto* g_forking = new std::vector<std::shared_ptr<DeviceWorkers::State>>;

void before_fork() {
  g_registry->mutex.lock();
  for (auto& weak : g_registry->sets)
    if (auto s = weak.lock()) g_forking->push_back(std::move(s));
  for (auto& s : *g_forking) s->mutex.lock();
}
void after_fork_parent() {
  for (auto& s : *g_forking) s->mutex.unlock();
  g_forking->clear();
  g_registry->mutex.unlock();
}
void after_fork_child() {
  for (auto& s : *g_forking) {
    // The threads do not exist here, and a queue's lock may be held by one of them: leak both.
    for (auto& t : s->threads) new std::shared_ptr<WorkQueue>(std::move(t.queue));
    s->threads.clear();
    s->mutex.unlock();  // locked by this same thread in before_fork
  }
  g_forking->clear();
  g_registry->mutex.unlock();
}
[[maybe_unused]] const int g_atfork =
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);

std::string thread_label(const std::string& role, const WorkerKey& key) {
  return key.index == 0 ? str(role, "-", key.device) : str(role, "-", key.device, "/", key.index);
}

}  // namespace

DeviceWorkers::DeviceWorkers(
    std::string role, std::function<void(const WorkerKey&, std::shared_ptr<WorkQueue>)> on_start)
    : role_(std::move(role)), on_start_(std::move(on_start)), state_(std::make_shared<State>()) {
  std::lock_guard lk(g_registry->mutex);
  std::erase_if(g_registry->sets, [](auto& w) { return w.expired(); });
  g_registry->sets.push_back(state_);
}

namespace {
void stop_threads(DeviceWorkers::State& state) {
  std::vector<DeviceWorkers::State::Thread> threads;
  {
    std::lock_guard lk(state.mutex);
    threads = std::move(state.threads);
    state.threads.clear();
  }
  for (auto& t : threads) t.queue->push([] { t_stop = true; });
  for (auto& t : threads) {
    t.thread->join();
    delete t.thread;
  }
}
}  // namespace

DeviceWorkers::~DeviceWorkers() { stop_threads(*state_); }

void DeviceWorkers::release_all_threads() {
  std::vector<std::shared_ptr<State>> sets;
  {
    std::lock_guard lk(g_registry->mutex);
    for (auto& weak : g_registry->sets)
      if (auto s = weak.lock()) sets.push_back(std::move(s));
  }
  for (auto& s : sets) stop_threads(*s);
}

std::shared_ptr<WorkQueue> DeviceWorkers::queue(const WorkerKey& key) {
  std::lock_guard lk(state_->mutex);
  for (auto& t : state_->threads)
    if (t.key == key) return t.queue;
  auto queue = std::make_shared<WorkQueue>();
  const std::string label = thread_label(role_, key);
  auto* thread = new std::thread([set = state_.get(), key, queue, label, on_start = on_start_] {
    t_set = set;
    cuda::DeviceGuard guard(key.device);  // a CUDA worker's device stays current
    trace::set_thread_name(label);
    if (on_start) on_start(key, queue);
    while (!t_stop) {
      WorkQueue::Job job = queue->pop();
      if (job) job();  // jobs catch what they throw (run() below, the engine's evaluate)
    }
  });
  // Linux keeps 15 characters of a thread's name: "td-" leaves room for "bw-cuda:0", "pp-cpu:1/3".
  pthread_setname_np(thread->native_handle(), ("td-" + label).substr(0, 15).c_str());
  state_->threads.push_back({key, queue, thread});
  return queue;
}

bool DeviceWorkers::on_worker() const { return t_set == state_.get(); }

void DeviceWorkers::run(const std::vector<WorkerKey>& keys, const std::function<void(size_t)>& fn,
                        const std::function<std::string(size_t)>& where) {
  auto located = [&](size_t k) {
    if (!where) return std::current_exception();
    try {
      return detail::with_context(std::current_exception(), where(k));
    } catch (...) {  // out of memory naming it: the error as it is
      return std::current_exception();
    }
  };
  if (on_worker()) {  // nested: this thread does every key's share itself
    for (size_t k = 0; k < keys.size(); ++k) {
      try {
        fn(k);
      } catch (...) {
        std::rethrow_exception(located(k));
      }
    }
    return;
  }
  struct Shared {
    std::mutex mutex;
    std::condition_variable done;
    size_t left;
    std::vector<std::exception_ptr> errors;
  };
  auto shared = std::make_shared<Shared>();
  shared->left = keys.size();
  shared->errors.resize(keys.size());
  const ThreadLocalState state = ThreadLocalState::capture();
  // The threads compute side by side: each takes its share of the caller's intra-op threads (one
  // each for two on two cores) rather than all of them.
  const int share = std::max(1, intra_op_threads() / std::max(1, int(keys.size())));
  // Every thread first (starting one may fail): once a job is queued, this frame must wait for it.
  std::vector<std::shared_ptr<WorkQueue>> queues;
  for (const WorkerKey& key : keys) queues.push_back(queue(key));
  size_t pushed = 0;
  auto wait_for = [&](size_t jobs) {
    std::unique_lock lk(shared->mutex);
    shared->left -= keys.size() - jobs;  // the jobs never queued
    shared->done.wait(lk, [&] { return shared->left == 0; });
  };
  for (size_t k = 0; k < keys.size(); ++k, ++pushed) {
    auto job = [&fn, &state, &located, share, shared, k] {
      std::exception_ptr error;
      try {
        ThreadLocalStateGuard guard(state);
        IntraOpThreadsGuard cores(share);
        fn(k);
      } catch (...) {
        error = located(k);
      }
      std::lock_guard lk(shared->mutex);
      shared->errors[k] = std::move(error);
      if (--shared->left == 0) shared->done.notify_all();
    };
    try {
      queues[k]->push(std::move(job));
    } catch (...) {
      wait_for(pushed);
      throw;
    }
  }
  wait_for(keys.size());
  std::vector<std::exception_ptr> errors;
  {
    std::lock_guard lk(shared->mutex);
    errors = std::move(shared->errors);  // the errors die here, on the caller's thread
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tandem
