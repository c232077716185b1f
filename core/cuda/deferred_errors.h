// core/cuda/deferred_errors.h — errors a kernel finds that the host hears of at its next sync.
// A kernel that meets an out-of-range index (a class target, an embedding id) lowers a device
// flag; reading that flag at once would stop the host on every call, a sync per training step
// that also rules out CUDA graphs. So the flag is registered here with an event after the kernel,
// and read when the host waits for the device anyway (a copy to the host such as item(),
// cuda::synchronize), where it costs a few microseconds: the IndexError names the op, the
// position and the bad value as the CPU's does, one sync point late. PyTorch reports the same
// errors with a device-side assert, which leaves the CUDA context unusable; this does not.
#pragma once

#include <tandem/core/tensor.h>
#include <functional>
#include <string>

namespace tandem::cuda {

/// Words the error for the lowest bad position `at` and the index found there.
using DescribeBadIndex = std::function<std::string(int64_t at, int64_t value)>;

/// Registers `flag` (one unsigned 64-bit word, all ones: no error), written by kernels queued so
/// far on the current stream of `flag`'s device, pointing into `indices`.
void defer_index_check(const Tensor& flag, const Tensor& indices, DescribeBadIndex describe);

/// Reads every flag registered on cuda:`device` (waiting for the kernels that write them) and
/// throws the first registered one's IndexError; the others are dropped. Called at host sync
/// points, so the wait is already over.
void raise_deferred_errors(int device);

}  // namespace tandem::cuda
