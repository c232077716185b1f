// core/cuda_device.h — the smallest CUDA queries core needs: is a GPU usable, and how many.
// No GPU, no driver, or a driver too old for the runtime all mean zero devices, never a crash.
// (The full device API — names, memory, DeviceGuard — arrives with the CUDA backend, issue #4.)
#pragma once

namespace tandem::cuda {

/// Number of visible CUDA devices (0 in a build without CUDA, or without a usable driver).
int device_count();
inline bool is_available() { return device_count() > 0; }

}  // namespace tandem::cuda
