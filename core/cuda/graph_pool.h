// core/cuda/graph_pool.h — what a CUDA graph's capture (core/cuda/graph.cpp) asks of the caching
// allocator (core/cuda/allocator.cu): a private pool for the blocks the graph's kernels use.
#pragma once

#include <cuda_runtime.h>

namespace tandem::cuda::detail {

/// A new pool id (never 0, which is the shared cache).
int new_graph_pool();
/// From now on, allocations on `s` (cuda:device) come from `graph_pool`, and blocks freed on `s`,
/// or by this thread on the device, go to it. Called by the capturing thread.
void begin_capture_allocations(int device, cudaStream_t s, int graph_pool);
/// The capture on `s` is over; the pool keeps its blocks. Called by the capturing thread.
void end_capture_allocations(int device, cudaStream_t s) noexcept;
/// The graph is gone: its pool's free blocks join the shared cache, and so will its blocks still
/// in use when they are freed.
void release_graph_pool(int device, int graph_pool) noexcept;

}  // namespace tandem::cuda::detail
