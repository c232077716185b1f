// parallel/data_parallel/parallel_apply.cpp — the replica threads and the fan-out/wait.
#include <pthread.h>
#include <tandem/autograd/thread_local_state.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/error.h>
#include <tandem/core/thread_pool.h>
#include <tandem/parallel/data_parallel/parallel_apply.h>
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace tandem::parallel {
namespace {

thread_local bool t_replica_thread = false;

// One device's thread: it runs queued jobs in order, for ever.
class ReplicaThread {
 public:
  explicit ReplicaThread(Device device) {
    std::thread t([this, device] {
      t_replica_thread = true;
      cuda::DeviceGuard guard(device);  // a CUDA replica's device stays current
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock lk(mutex_);
          ready_.wait(lk, [&] { return !jobs_.empty(); });
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        job();  // never throws: parallel_apply's jobs catch everything
      }
    });
    pthread_setname_np(t.native_handle(), ("tandem-dp-" + device.str()).substr(0, 15).c_str());
    t.detach();
  }
  void push(std::function<void()> job) {
    {
      std::lock_guard lk(mutex_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
};

// Immortal, as the backward workers (autograd/ready_queue.cpp): no exit-time destructor may wait
// for a thread blocked on its queue. A forked child forgets the threads, which it does not have.
struct Registry {
  std::mutex mutex;
  std::unordered_map<Device, ReplicaThread*> threads;
};
Registry* g_registry = new Registry;

void before_fork() { g_registry->mutex.lock(); }
void after_fork_parent() { g_registry->mutex.unlock(); }
void after_fork_child() {
  g_registry->mutex.unlock();  // locked by this same thread in before_fork
  g_registry = new Registry;
}
[[maybe_unused]] const int g_atfork =
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);

ReplicaThread& replica_thread(Device device) {
  std::lock_guard lk(g_registry->mutex);
  ReplicaThread*& t = g_registry->threads[device];
  if (!t) t = new ReplicaThread(device);
  return *t;
}

std::string where(size_t k, Device device) { return str("replica ", k, " on ", device); }

}  // namespace

void parallel_apply(const std::vector<Device>& devices, const std::function<void(size_t)>& fn) {
  if (devices.size() == 1 || t_replica_thread) {
    for (size_t k = 0; k < devices.size(); ++k) {
      try {
        fn(k);
      } catch (...) {
        std::rethrow_exception(
            ::tandem::detail::with_context(std::current_exception(), where(k, devices[k])));
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
  shared->left = devices.size();
  shared->errors.resize(devices.size());
  const ThreadLocalState state = ThreadLocalState::capture();
  const int threads = intra_op_threads();
  auto run = [&fn, &state, &devices, threads, shared](size_t k) {
    std::exception_ptr error;
    try {
      ThreadLocalStateGuard guard(state);
      // The replicas compute side by side: each takes its share of the caller's intra-op
      // threads (one each for two replicas on two cores) rather than all of them.
      IntraOpThreadsGuard share(std::max(1, threads / int(devices.size())));
      fn(k);
    } catch (...) {
      error = ::tandem::detail::with_context(std::current_exception(), where(k, devices[k]));
    }
    std::lock_guard lk(shared->mutex);
    shared->errors[k] = std::move(error);
    if (--shared->left == 0) shared->done.notify_all();
  };
  for (size_t k = 0; k < devices.size(); ++k) replica_thread(devices[k]).push([run, k] { run(k); });
  std::vector<std::exception_ptr> errors;
  {
    std::unique_lock lk(shared->mutex);
    shared->done.wait(lk, [&] { return shared->left == 0; });
    errors = std::move(shared->errors);  // the errors die here, on the caller's thread
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace tandem::parallel
