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

namespace detail {
/// Calls fn(lo, hi) over chunks of [begin, end) of at least `grain` items, in parallel when the
/// range is large enough and the caller is not already inside the pool.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);
bool in_parallel_region();
}  // namespace detail

}  // namespace tandem
