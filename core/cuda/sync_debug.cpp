// core/cuda/sync_debug.cpp — counting and reporting the host syncs nobody asked for
// (cuda_device.h, SyncDebugMode). The mode is process-wide, as PyTorch's: the sync may happen on
// a worker thread (a backward worker, a DataLoader's) that the setting must reach. And which
// devices a CUDA graph is capturing (core/cuda/graph.cpp): a host sync there is always an error.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <atomic>
#include <cstdio>

namespace tandem::cuda {
namespace {
std::atomic<SyncDebugMode> g_mode{SyncDebugMode::Off};
std::atomic<int64_t> g_syncs{0};
std::atomic<int> g_captures[Device::kMaxCudaDevices] = {};
}  // namespace

bool is_capturing(int device) {
  // Cheap while no graph is capturing anywhere; then only the calling thread's stream counts, so
  // that other threads' work on the device goes on as usual.
  if (device < 0 || device >= Device::kMaxCudaDevices ||
      g_captures[device].load(std::memory_order_relaxed) == 0)
    return false;
  return detail::current_stream_is_capturing(device);
}

namespace detail {
#if !TANDEM_HAS_CUDA
bool current_stream_is_capturing(int) { return false; }
#endif
void note_capture(int device, bool begins) { g_captures[device].fetch_add(begins ? 1 : -1); }
}  // namespace detail

void set_sync_debug_mode(SyncDebugMode mode) { g_mode.store(mode); }
SyncDebugMode sync_debug_mode() { return g_mode.load(); }
int64_t host_syncs() { return g_syncs.load(); }

void note_host_sync(const char* what) {
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  int capturing = -1;  // a capture on this thread's current stream (a backward worker's too)
  for (int d = 0; capturing < 0 && d < Device::kMaxCudaDevices; ++d)
    if (is_capturing(d)) capturing = d;
  if (capturing >= 0)
    ::tandem::detail::fail<CudaError>(
        "the host would wait for the GPU in ", what,
        " while capturing a CUDA graph on cuda:", capturing,
        ": a captured step cannot read a result (no item(), no copy to the host)",
        "\n  hint: read it after replay(), from the tensor the captured step wrote");
  switch (g_mode.load(std::memory_order_relaxed)) {
    case SyncDebugMode::Off:
      return;
    case SyncDebugMode::Warn:
      std::fprintf(stderr, "tandem: warning: the host waits for the GPU in %s (sync debug mode)\n",
                   what);
      return;
    case SyncDebugMode::Error:
      ::tandem::detail::fail<CudaError>(
          "the host waits for the GPU in ", what,
          ", with the sync debug mode set to Error (cuda::set_sync_debug_mode)");
  }
}

}  // namespace tandem::cuda
