// Per-device memory statistics rise and fall as tensors live and die; cpu:0 and cpu:1 apart.
#include <tandem/core/allocator.h>

#include "support/expect.h"

using namespace tandem;

TEST(MemoryStats, RiseAndFallWithTensorLifetimes) {
  const Device d("cpu:5");
  const MemoryStats before = memory_stats(d);
  {
    Tensor a = empty({1000}, {.device = d});  // 4000 bytes
    MemoryStats s = memory_stats(d);
    EXPECT_EQ(s.allocated_bytes - before.allocated_bytes, 4000);
    EXPECT_EQ(s.active_allocations - before.active_allocations, 1);
    Tensor view = a.reshape({10, 100});  // views allocate nothing
    EXPECT_EQ(memory_stats(d).allocated_bytes, s.allocated_bytes);
    {
      Tensor b = zeros({250}, {.dtype = kFloat64, .device = d});  // 2000 bytes
      EXPECT_EQ(memory_stats(d).allocated_bytes - before.allocated_bytes, 6000);
    }
    EXPECT_EQ(memory_stats(d).allocated_bytes - before.allocated_bytes, 4000);
    EXPECT_GE(memory_stats(d).peak_allocated_bytes - before.allocated_bytes, 6000);
  }
  const MemoryStats after = memory_stats(d);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.active_allocations, before.active_allocations);
  EXPECT_EQ(after.total_allocations - before.total_allocations, 2);
  reset_peak_memory_stats(d);
  EXPECT_EQ(memory_stats(d).peak_allocated_bytes, after.allocated_bytes);
}

TEST(MemoryStats, VirtualCpuDevicesAreCountedApart) {
  const Device d6("cpu:6"), d7("cpu:7");
  const int64_t b6 = memory_stats(d6).allocated_bytes, b7 = memory_stats(d7).allocated_bytes;
  Tensor a = ones({256}, {.device = d6});
  EXPECT_EQ(memory_stats(d6).allocated_bytes - b6, 1024);
  EXPECT_EQ(memory_stats(d7).allocated_bytes, b7);
  Tensor moved = a.to(d7);
  EXPECT_EQ(memory_stats(d7).allocated_bytes - b7, 1024);
}

TEST(Allocator, LargeBlocksAreCachedAndReusedUntilEmptyCache) {
  const Device d("cpu:8");
  empty_cache(d);
  const MemoryStats base = memory_stats(d);
  void* first = nullptr;
  {
    Tensor big = empty({1 << 20}, {.device = d});  // 4 MiB: cached when freed
    first = big.data_ptr();
    EXPECT_EQ(memory_stats(d).reserved_bytes - base.reserved_bytes, 4 << 20);
  }
  EXPECT_EQ(memory_stats(d).allocated_bytes, base.allocated_bytes);
  EXPECT_EQ(memory_stats(d).reserved_bytes - base.reserved_bytes, 4 << 20);  // kept for reuse
  {
    Tensor again = empty({1 << 20}, {.device = d});
    EXPECT_EQ(again.data_ptr(), first);  // the same block, no new page faults
    EXPECT_EQ(memory_stats(d).reserved_bytes - base.reserved_bytes, 4 << 20);
  }
  empty_cache(d);
  EXPECT_EQ(memory_stats(d).reserved_bytes, base.reserved_bytes);
}

TEST(Allocator, CpuMemoryIs64ByteAligned) {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kCpuAlignment, 0u) << n;
  }
}
