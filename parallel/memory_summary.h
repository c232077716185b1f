// parallel/memory_summary.h — the per-device memory statistics as a table, in the spirit of
// torch.cuda.memory_summary: bytes held by live tensors now, their peak since the last
// reset_peak_memory_stats, and what the allocator has reserved. It is how DataParallel's device-0
// imbalance is seen (examples/data_parallel_memory).
#pragma once

#include <tandem/core/device.h>
#include <string>
#include <vector>

namespace tandem::parallel {

/// One row per device: allocated, peak and reserved, in MiB.
std::string memory_summary(const std::vector<Device>& devices);

}  // namespace tandem::parallel
