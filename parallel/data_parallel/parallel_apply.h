// parallel/data_parallel/parallel_apply.h — DataParallel's third step: run each replica's forward
// on its own device's thread, all at once. Each device has one long-lived replica thread (started
// on first use), which runs the work under the caller's ThreadLocalState (grad mode, streams, and
// autocast when it exists) with its device current. The caller waits for every replica; the first
// exception (in replica order) is re-thrown with "replica k on <device>" in front and its type
// kept, after the other replicas have finished, so nothing is left running.
#pragma once

#include <tandem/core/device.h>
#include <functional>
#include <vector>

namespace tandem::parallel {

/// Calls fn(k) on devices[k]'s replica thread for every k, and waits. With one device, or when
/// called from a replica thread (DataParallel inside DataParallel), it runs on the calling thread.
void parallel_apply(const std::vector<Device>& devices, const std::function<void(size_t)>& fn);

}  // namespace tandem::parallel
