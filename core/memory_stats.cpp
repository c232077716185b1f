// core/memory_stats.cpp — lock-free counters, one block per device. Allocation happens on many
// threads at once (DataLoader workers, DataParallel replicas), hence the atomics.
#include <tandem/core/check.h>
#include <tandem/core/memory_stats.h>
#include <atomic>

namespace tandem {
namespace {

struct Counters {
  std::atomic<int64_t> allocated{0}, peak{0}, reserved{0}, active{0}, total{0};
};

Counters& counters(Device d) {
  static Counters cpu[Device::kMaxCpuDevices];
  static Counters cuda[Device::kMaxCudaDevices];
  static Counters meta[Device::kMaxCpuDevices];
  const int i = d.index();
  if (d.is_meta()) {
    TD_INTERNAL_ASSERT(i >= 0 && i < Device::kMaxCpuDevices, "device ", d);
    return meta[i];
  }
  if (d.is_cpu()) {
    TD_INTERNAL_ASSERT(i >= 0 && i < Device::kMaxCpuDevices, "device ", d);
    return cpu[i];
  }
  TD_INTERNAL_ASSERT(i >= 0 && i < Device::kMaxCudaDevices, "device ", d);
  return cuda[i];
}

}  // namespace

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return {c.allocated.load(), c.peak.load(), c.reserved.load(), c.active.load(), c.total.load()};
}

void reset_peak_memory_stats(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.allocated.load());
}

namespace detail {

void record_allocation(Device device, int64_t bytes) {
  Counters& c = counters(device);
  const int64_t now = c.allocated.fetch_add(bytes) + bytes;
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  c.active.fetch_add(1);
  c.total.fetch_add(1);
}

void record_free(Device device, int64_t bytes) {
  Counters& c = counters(device);
  c.allocated.fetch_sub(bytes);
  c.active.fetch_sub(1);
}

void record_reserved(Device device, int64_t delta_bytes) {
  counters(device).reserved += delta_bytes;
}

}  // namespace detail
}  // namespace tandem
