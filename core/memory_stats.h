// core/memory_stats.h — per-device memory statistics: bytes in use, peak, allocation counts and,
// for CUDA's caching allocator, bytes reserved. cpu:0 and cpu:1 are counted apart, which is how
// DataParallel's imbalance and checkpointing's savings are measured on a machine without a GPU.
#pragma once

#include <tandem/core/device.h>
#include <cstdint>

namespace tandem {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // bytes held by live tensors now
  int64_t peak_allocated_bytes = 0;  // high-water mark since the last reset_peak_memory_stats
  int64_t reserved_bytes = 0;        // bytes the allocator holds from the system: live + cached
  int64_t active_allocations = 0;    // live allocations now
  int64_t total_allocations = 0;     // allocations ever made on this device
};

/// A snapshot of `device`'s counters.
MemoryStats memory_stats(Device device);
/// Sets the peak back to the bytes in use now.
void reset_peak_memory_stats(Device device);
/// Returns the allocator's cached free blocks on `device` to the system (reserved_bytes falls to
/// what live tensors use). CPU devices cache blocks of 4 KiB and more; CUDA caches all blocks.
void empty_cache(Device device);

namespace detail {
// Called by the allocators, never by ops.
void record_allocation(Device device, int64_t bytes);
void record_free(Device device, int64_t bytes);
void record_reserved(Device device, int64_t delta_bytes);
}  // namespace detail

}  // namespace tandem
