// core/cuda/allocator.cu — the caching allocator for CUDA memory. cudaMalloc and cudaFree are
// slow and synchronise the device, so freed blocks are kept per device and per stream and handed
// out again: requests under 1 MiB are rounded up to 512 B and served from a small-block pool;
// larger ones are rounded up to 2 MiB and served from a large-block pool (a cached block is reused
// when it is at most twice the request, so a 2 MiB block never serves a 512 B tensor). A block is
// reused only by the stream it was allocated on: a kernel still running on another stream could
// be using it. A block that record_stream() says another stream also reads is, when freed, held
// back with an event on each such stream and cached only once they have all passed it (PyTorch's
// record_stream). When cudaMalloc fails, the cache is emptied and the allocation retried; then
// the CudaError names the request, the device and its free memory.
#include <cuda_runtime.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/memory_stats.h>
#include <map>
#include <mutex>
#include <tandem/core/kernels/cuda/launch.cuh>
#include <unordered_map>
#include <vector>

namespace tandem::cuda {
namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kSmallLimit = size_t(1) << 20;
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_size(size_t n) {
  const size_t r = n < kSmallLimit ? kSmallRound : kLargeRound;
  return (n + r - 1) / r * r;
}

struct Block {
  void* ptr = nullptr;
  size_t size = 0;  // rounded, as allocated from CUDA
  cudaStream_t stream = nullptr;
  std::vector<cudaStream_t> uses;  // other streams that read or write it (record_stream)
};

// A freed block waiting for the streams in its `uses` to pass the events recorded at free time.
struct Held {
  Block block;
  std::vector<cudaEvent_t> events;
};

struct DevicePool {
  std::mutex mu;
  std::multimap<size_t, Block> free_blocks;  // by size: lower_bound finds the best fit
  std::unordered_map<void*, Block> active;
  std::vector<Held> held;
  std::vector<cudaEvent_t> spare_events;  // reused: creating an event costs a driver call
};

DevicePool& pool(int device) {
  // One per device, found by index: no lock or lookup before the pool's own. Never destroyed: a
  // CUDA tensor with static storage, or on a thread outliving main(), is freed after
  // function-local statics would be. (Callers have checked the index: DeviceGuard does.)
  static auto* pools = new DevicePool[Device::kMaxCudaDevices];
  return pools[device];
}

std::string mib(size_t bytes) { return str(double(bytes) / double(1 << 20), " MiB"); }

// Frees every cached block of the pool (caller holds its mutex and is on its device).
void release_cached(Device device, DevicePool& p) {
  for (auto& [size, b] : p.free_blocks) {
    cudaFree(b.ptr);
    ::tandem::detail::record_reserved(device, -int64_t(b.size));
  }
  p.free_blocks.clear();
}

// Moves held blocks whose streams have all passed their events to the cache; with `wait`, waits
// for them first (before giving memory back to CUDA). Caller holds the mutex, on the device.
void release_held(DevicePool& p, bool wait) {
  auto done = [&](Held& h) {
    for (cudaEvent_t e : h.events) {
      if (wait) cudaEventSynchronize(e);
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
    }
    for (cudaEvent_t e : h.events) p.spare_events.push_back(e);
    h.block.uses.clear();
    p.free_blocks.emplace(h.block.size, h.block);
    return true;
  };
  std::erase_if(p.held, done);
}

}  // namespace

void* allocate(Device device, size_t nbytes) {
  DeviceGuard guard(device);  // also checks that the device exists
  DevicePool& p = pool(device.index());
  const size_t size = round_size(nbytes);
  const cudaStream_t s = stream();
  std::lock_guard lk(p.mu);
  if (!p.held.empty()) release_held(p, /*wait=*/false);
  // Best fit among cached blocks of this stream, no more than twice the size we need.
  for (auto it = p.free_blocks.lower_bound(size);
       it != p.free_blocks.end() && it->first <= 2 * size; ++it) {
    if (it->second.stream != s) continue;
    Block b = it->second;
    p.free_blocks.erase(it);
    p.active.emplace(b.ptr, b);
    ::tandem::detail::record_allocation(device, int64_t(nbytes));
    return b.ptr;
  }
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {  // out of memory: give the cache back, try again
    (void)cudaGetLastError();
    release_held(p, /*wait=*/true);
    release_cached(device, p);
    err = cudaMalloc(&ptr, size);
  }
  if (err != cudaSuccess && err != cudaErrorMemoryAllocation)
    TD_CUDA_CHECK(err);  // not memory: e.g. a sticky fault from an earlier kernel, said as such
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    const MemoryStats st = memory_stats(device);
    ::tandem::detail::fail<CudaError>(
        "CUDA out of memory: cannot allocate ", mib(nbytes), " on ", device, " (", mib(free_bytes),
        " free of ", mib(total), "; Tandem holds ", mib(size_t(st.allocated_bytes)),
        " in tensors, ", mib(size_t(st.reserved_bytes)), " reserved): ", cudaGetErrorString(err),
        "\n  hint: a smaller batch, or free tensors you no longer need");
  }
  p.active.emplace(ptr, Block{ptr, size, s});
  ::tandem::detail::record_reserved(device, int64_t(size));
  ::tandem::detail::record_allocation(device, int64_t(nbytes));
  return ptr;
}

void deallocate(Device device, void* ptr, size_t nbytes) noexcept {
  DevicePool& p = pool(device.index());
  std::lock_guard lk(p.mu);
  auto it = p.active.find(ptr);
  if (it == p.active.end()) return;  // not ours: nothing sensible to do in a noexcept path
  Block b = std::move(it->second);
  p.active.erase(it);
  ::tandem::detail::record_free(device, int64_t(nbytes));
  if (b.uses.empty()) {  // cached, not freed: the next allocation of this size is free
    p.free_blocks.emplace(b.size, b);
    return;
  }
  // Other streams may still be reading it: mark where each one is now, and cache the block once
  // all of them have got there. By hand, not DeviceGuard: this is noexcept.
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device.index());
  Held h{std::move(b), {}};
  for (cudaStream_t s : h.block.uses) {
    cudaEvent_t e = nullptr;
    if (!p.spare_events.empty()) {
      e = p.spare_events.back();
      p.spare_events.pop_back();
    } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      // No event to be had: wait for the stream instead, the slow but safe answer.
      (void)cudaGetLastError();
      cudaStreamSynchronize(s);
      continue;
    }
    cudaEventRecord(e, s);
    h.events.push_back(e);
  }
  p.held.push_back(std::move(h));
  cudaSetDevice(previous);
}

void record_stream(Device device, void* ptr, cudaStream_t s) {
  DevicePool& p = pool(device.index());
  std::lock_guard lk(p.mu);
  auto it = p.active.find(ptr);
  TD_CHECK_VALUE(it != p.active.end(), "record_stream: the tensor's memory on ", device,
                 " did not come from Tandem's CUDA allocator (a tensor wrapping outside memory)");
  Block& b = it->second;
  if (s == b.stream) return;  // the stream it was allocated on orders itself
  for (cudaStream_t u : b.uses)
    if (u == s) return;
  b.uses.push_back(s);
}

// A stream being destroyed (after a synchronize): its cached blocks become the default stream's,
// so they are reused instead of stranded, and a new stream that happens to get the same handle
// cannot pick them up unordered.
void forget_stream(int device, cudaStream_t s) noexcept {
  DevicePool& p = pool(device);
  std::lock_guard lk(p.mu);
  for (auto& [size, b] : p.free_blocks)
    if (b.stream == s) b.stream = cudaStreamLegacy;
  for (auto& [ptr, b] : p.active) {
    if (b.stream == s) b.stream = cudaStreamLegacy;
    std::erase(b.uses, s);  // synchronized: its reads are over
  }
}

void empty_cache(Device device) noexcept {
  if (device.index() >= device_count()) return;
  DevicePool& p = pool(device.index());
  std::lock_guard lk(p.mu);
  int previous = 0;  // by hand, not DeviceGuard: this is noexcept, and the guard can throw
  cudaGetDevice(&previous);
  cudaSetDevice(device.index());
  release_held(p, /*wait=*/true);
  release_cached(device, p);
  cudaSetDevice(previous);
}

}  // namespace tandem::cuda
