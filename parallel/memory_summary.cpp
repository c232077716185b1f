// parallel/memory_summary.cpp — formatting the memory statistics.
#include <tandem/core/memory_stats.h>
#include <tandem/parallel/memory_summary.h>
#include <cstdio>

namespace tandem::parallel {

std::string memory_summary(const std::vector<Device>& devices) {
  auto mib = [](int64_t bytes) { return double(bytes) / (1 << 20); };
  std::string out = "device     allocated MiB   peak MiB   reserved MiB\n";
  for (Device d : devices) {
    const MemoryStats s = memory_stats(d);
    char row[128];
    std::snprintf(row, sizeof row, "%-10s %13.1f %10.1f %14.1f\n", d.str().c_str(),
                  mib(s.allocated_bytes), mib(s.peak_allocated_bytes), mib(s.reserved_bytes));
    out += row;
  }
  return out;
}

}  // namespace tandem::parallel
