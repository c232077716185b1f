// core/allocator.h — raw memory for tensors. The CPU allocator returns 64-byte aligned blocks (one
// cache line, a full AVX-512 vector); the CUDA allocator lives in core/cuda/. Both feed the
// per-device memory statistics.
#pragma once

#include <tandem/core/device.h>
#include <cstddef>

namespace tandem {

inline constexpr size_t kCpuAlignment = 64;

/// Allocates `nbytes` on `device` (nullptr for 0 bytes). Throws DeviceError/CudaError on failure.
void* allocate(Device device, size_t nbytes);
/// Returns a block from allocate() with the same device and size.
void deallocate(Device device, void* ptr, size_t nbytes) noexcept;

}  // namespace tandem
