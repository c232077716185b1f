// core/thread_pool.h — the one intra-op thread pool for CPU kernels. Large kernels split their
// range over it; small ones run on the caller. When several threads call it at once (the backward
// workers of cpu:0 and cpu:1, DataLoader workers), the n threads are shared fairly: each of k
// concurrent calls gets its own thread plus workers up to n / k in all. A call from inside a pool
// task runs serially, so the pool adds no threads beyond n − 1 workers.
#pragma once

#include <cstdint>
#include <functional>

namespace tandem {

/// Intra-op threads (>= 1). Default: TANDEM_NUM_THREADS, else the number of cores. OpenBLAS is
/// kept at one thread: large matrix products are split over this pool instead.
void set_num_threads(int n);
int get_num_threads();

/// The intra-op threads this thread's kernels may use: get_num_threads(), or less inside an
/// IntraOpThreadsGuard. Threads that compute side by side on purpose (DataParallel's replicas, a
/// backward spread over several devices' threads) each take their share of the cores this way;
/// with a share of 1 a kernel runs on its own thread and leaves the pool's workers asleep, instead
/// of having them join whichever thread is alone for a moment and then compete for the cores.
int intra_op_threads();

/// Caps the calling thread's intra-op threads at n (>= 1) for the scope (never raises the cap).
/// The results are the same bits whatever the cap: kernels are split into the same chunks, except
/// oneDNN's matrix products, split into one block of rows per thread they may use, which changes
/// no element's sum (tested), so that a capped thread runs one product, not several small ones.
class IntraOpThreadsGuard {
 public:
  explicit IntraOpThreadsGuard(int n);
  ~IntraOpThreadsGuard();
  IntraOpThreadsGuard(const IntraOpThreadsGuard&) = delete;
  IntraOpThreadsGuard& operator=(const IntraOpThreadsGuard&) = delete;

 private:
  int previous_;
};

namespace detail {
/// Ends the pool's workers, and OpenBLAS's and OpenMP's threads, once their current work is done;
/// each starts again on next use, the pool with the same number of threads. parallel::spawn calls
/// it so that it forks a process with no thread but the caller's.
void release_threads();
/// Calls fn(lo, hi) over chunks of [begin, end) of at least `grain` items, in parallel when the
/// range is large enough and the caller is not already inside the pool.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);
bool in_parallel_region();
/// The raw cap behind intra_op_threads() (0: none), carried by ThreadLocalState.
int intra_op_threads_cap();
void set_intra_op_threads_cap(int cap);
}  // namespace detail

}  // namespace tandem
