// core/thread_pool.cpp — a fixed pool of (n − 1) workers plus the calling threads. Several
// parallel_for calls may run at once (backward workers of two devices, DataLoader workers): each
// caller works on its own range, and the workers split themselves fairly among the running calls,
// so that each of k callers gets about n / k threads. A call from inside a task runs serially.
// Chunking depends only on the range and n, never on how many threads happen to help, so results
// are the same bits however the threads were shared.
#include <pthread.h>
#include <tandem/core/check.h>
#include <tandem/core/env.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if TANDEM_WITH_BLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif
// Weak: what stops OpenBLAS's and OpenMP's own threads, where the library linked has them
// (OpenBLAS starts its threads when it is loaded, whatever openblas_set_num_threads says later).
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));
extern "C" int omp_pause_resource_all(int kind) __attribute__((weak));

namespace tandem {
namespace {

thread_local bool t_in_region = false;
thread_local int t_cap = 0;  // IntraOpThreadsGuard's cap on this thread's threads; 0: none

// Waits until ready() holds, spinning for up to spin_time() first. Ops follow one another within
// microseconds in a training step, but the serial work between two parallel ops (autograd
// bookkeeping, small ops) can outlast a short spin. A worker that has gone to sleep leaves its
// vCPU idle, a VM's host then deschedules that vCPU, and waking it can take milliseconds, so the
// workers spin for about a millisecond (bench/HISTORY.md has the measurements). OpenMP runtimes
// spin similarly (libgomp's spin count, Intel's 200 ms KMP_BLOCKTIME). TANDEM_SPIN_US overrides it
// (0: block at once); it is read when a pool is built, on the caller's thread, so a bad value is a
// ValueError there rather than an exception escaping a worker thread.
std::chrono::microseconds spin_time() {
  return std::chrono::microseconds(std::max<int64_t>(0, detail::env_int("TANDEM_SPIN_US", 1000)));
}

template <typename F>
bool spin_until(std::chrono::microseconds spin, F ready) {
  const auto until = std::chrono::steady_clock::now() + spin;
  for (int i = 1;; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
  }
}

// One parallel_for call. The caller always works on its own job; pool workers join it up to its
// fair share of the threads.
struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t begin, end, chunks;
  int max_threads;                  // the caller's intra-op cap, the caller included
  std::atomic<int64_t> next{0};     // the next chunk to claim
  std::atomic<int64_t> pending{0};  // chunks not yet finished
  std::atomic<int> helpers{0};      // pool workers inside drain()
  std::exception_ptr error;         // the first, guarded by Pool::mu_

  bool has_work() const { return next.load() < chunks; }
};

class Pool {
 public:
  explicit Pool(int n) : n_(n), spin_(spin_time()) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return n_; }

  // Runs fn over [begin, end) in `chunks` pieces, with the caller and up to its share of workers.
  void run(int64_t begin, int64_t end, int64_t chunks, int max_threads,
           const std::function<void(int64_t, int64_t)>& fn) {
    Job job;
    job.fn = &fn;
    job.begin = begin;
    job.end = end;
    job.chunks = chunks;
    job.max_threads = max_threads;
    job.pending = chunks;
    {
      std::lock_guard lk(mu_);
      jobs_.push_back(&job);
      running_ = int(jobs_.size());
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    t_in_region = true;
    drain(job, /*helper=*/false);
    t_in_region = false;
    // The job is over when every chunk is done and every helper has left drain(): only then may
    // it leave the caller's stack.
    auto done = [&] { return job.pending.load() == 0 && job.helpers.load() == 0; };
    spin_until(spin_, done);
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, done);
    std::erase(jobs_, &job);
    running_ = int(jobs_.size());
    generation_.fetch_add(1);  // a larger share for the jobs left
    lk.unlock();
    cv_.notify_all();
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  // Takes chunks of `job` until none is left; every thread of the job runs this. A helper also
  // leaves when the job holds more than its share because another job started meanwhile.
  void drain(Job& job, bool helper) {
    for (;;) {
      if (helper && job.helpers.load() >= share(job, running_.load())) return;
      const int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) return;
      const int64_t len = job.end - job.begin;
      const int64_t lo = job.begin + len * c / job.chunks,
                    hi = job.begin + len * (c + 1) / job.chunks;
      try {
        (*job.fn)(lo, hi);
      } catch (...) {
        std::lock_guard lk(mu_);
        if (!job.error) job.error = std::current_exception();
      }
      if (job.pending.fetch_sub(1) == 1) {
        std::lock_guard lk(mu_);
        done_cv_.notify_all();
      }
    }
  }

  // The job a free worker should help (under mu_): the one with work left and the fewest
  // helpers, if that is below its share. Each job's share is n / (running jobs) threads, its
  // caller included, so two devices computing at once split the cores instead of one taking all.
  Job* pick() {
    if (jobs_.empty()) return nullptr;
    Job* best = nullptr;
    for (Job* j : jobs_)
      if (j->has_work() && 1 + j->helpers.load() < share(*j, int(jobs_.size())) &&
          (!best || j->helpers.load() < best->helpers.load()))
        best = j;
    return best;
  }

  // The threads `job` may have, its caller included, while `running` jobs share the pool.
  int share(const Job& job, int running) const {
    return std::max(1, std::min(n_ / std::max(1, running), job.max_threads));
  }

  void work() {
    t_in_region = true;
    bool worked = false;  // spin only right after a job: the next one usually follows closely
    for (;;) {
      Job* job = nullptr;
      {
        const auto spin_until_time = std::chrono::steady_clock::now() + spin_;
        std::unique_lock lk(mu_);
        for (;;) {
          if (stop_) return;
          if ((job = pick())) break;
          const uint64_t seen = generation_.load();
          const auto left = spin_until_time - std::chrono::steady_clock::now();
          if (worked && left > left.zero()) {
            lk.unlock();
            spin_until(std::chrono::duration_cast<std::chrono::microseconds>(left),
                       [&] { return generation_.load() != seen; });
            lk.lock();
            continue;
          }
          cv_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
        }
        ++job->helpers;
      }
      drain(*job, /*helper=*/true);
      if (job->helpers.fetch_sub(1) == 1) {
        std::lock_guard lk(mu_);
        done_cv_.notify_all();
      }
      worked = true;
    }
  }

  const int n_;
  const std::chrono::microseconds spin_;  // before a waiting thread blocks
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  bool stop_ = false;
  std::atomic<uint64_t> generation_{0};  // bumped when a job starts or ends
  std::vector<Job*> jobs_;               // running, oldest first
  std::atomic<int> running_{0};          // jobs_.size(), readable without the lock
};

int default_threads() {
  if (!detail::env_str("TANDEM_NUM_THREADS").empty()) {
    const int64_t n = detail::env_int("TANDEM_NUM_THREADS", 0);
    TD_CHECK_VALUE(n >= 1, "TANDEM_NUM_THREADS=", n, " is not a positive integer");
    return int(n);
  }
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

std::mutex g_pool_mu;
std::unique_ptr<Pool> g_pool;
int g_pool_size = 0;  // set_num_threads's n, kept when release_threads() stops the pool; 0: default

// A forked child (parallel::spawn) has only the forking thread: the pool's workers are gone, so
// the child forgets the pool (leaking it; its mutexes may be held by threads that no longer exist)
// and builds a new one on first use. Holding g_pool_mu across the fork keeps it consistent.
void before_fork() { g_pool_mu.lock(); }
void after_fork_parent() { g_pool_mu.unlock(); }
void after_fork_child() {
  (void)g_pool.release();
  g_pool_size = 0;     // the child's environment (spawn's worker_env) decides its threads
  g_pool_mu.unlock();  // locked by this same thread in before_fork
}
[[maybe_unused]] const int g_atfork =
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);

Pool& pool() {
  std::lock_guard lk(g_pool_mu);
  if (!g_pool) {
    g_pool = std::make_unique<Pool>(g_pool_size > 0 ? g_pool_size : default_threads());
#if TANDEM_WITH_BLAS
    openblas_set_num_threads(1);  // the pool splits products (kernels/cpu/gemm_util.h)
#endif
  }
  return *g_pool;
}

}  // namespace

void set_num_threads(int n) {
  TD_CHECK_VALUE(n >= 1, "set_num_threads: expected at least 1 thread, but got ", n);
  std::lock_guard lk(g_pool_mu);
  g_pool.reset();
  g_pool = std::make_unique<Pool>(n);
  g_pool_size = n;
#if TANDEM_WITH_BLAS
  openblas_set_num_threads(1);
#endif
}

int get_num_threads() { return pool().size(); }

int intra_op_threads() {
  const int n = get_num_threads();
  return t_cap > 0 ? std::min(t_cap, n) : n;
}

IntraOpThreadsGuard::IntraOpThreadsGuard(int n) : previous_(t_cap) {
  TD_CHECK_VALUE(n >= 1, "IntraOpThreadsGuard: expected at least 1 thread, but got ", n);
  t_cap = previous_ > 0 ? std::min(previous_, n) : n;
}
IntraOpThreadsGuard::~IntraOpThreadsGuard() { t_cap = previous_; }

namespace detail {

void release_threads() {
  {
    std::lock_guard lk(g_pool_mu);
    g_pool.reset();  // joins the workers once their current chunks are done
  }
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
  constexpr int kOmpPauseHard = 2;  // omp_pause_hard: the runtime's threads end
  if (omp_pause_resource_all != nullptr) omp_pause_resource_all(kOmpPauseHard);
}

bool in_parallel_region() { return t_in_region; }
int intra_op_threads_cap() { return t_cap; }
void set_intra_op_threads_cap(int cap) { t_cap = cap; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  const int64_t len = end - begin;
  grain = std::max<int64_t>(grain, 1);
  if (t_in_region || len < 2 * grain) return fn(begin, end);
  Pool& p = pool();
  // A few chunks per thread, claimed dynamically: a thread slowed by the machine (a descheduled
  // vCPU, another process) leaves its unclaimed chunks to the others instead of holding up all.
  const int64_t chunks = std::min<int64_t>(4 * int64_t(p.size()), len / grain);
  if (chunks <= 1) return fn(begin, end);
  const int max_threads = t_cap > 0 ? std::min(t_cap, p.size()) : p.size();
  if (max_threads == 1) {
    // The same chunks, in order, on this thread (nested calls inside serial, as in the pool): the
    // same bits as a pool run.
    struct InRegion {
      InRegion() { t_in_region = true; }
      ~InRegion() { t_in_region = false; }
    } in_region;
    for (int64_t c = 0; c < chunks; ++c)
      fn(begin + len * c / chunks, begin + len * (c + 1) / chunks);
    return;
  }
  p.run(begin, end, chunks, max_threads, fn);
}

}  // namespace detail
}  // namespace tandem
