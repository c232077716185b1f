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
//
// CUDA graphs (core/cuda/graph.cpp): while a graph captures a stream, that stream's allocations
// come from the graph's private pool, and blocks freed on it (made before the capture or during
// it) go back to that pool: the graph's kernels use those addresses at every replay, so nothing
// outside the graph may be handed them while it lives. When the graph is destroyed, its pool's
// free blocks join the shared cache, and its blocks still in use join it when they are freed.
#include <cuda_runtime.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/graph_pool.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/memory_stats.h>
#include <atomic>
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
  int graph_pool = 0;              // 0: the shared cache; else the CUDA graph's that owns it
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
  std::vector<cudaEvent_t> spare_events;            // reused: creating an event costs a driver call
  std::unordered_map<cudaStream_t, int> capturing;  // streams being captured -> their graph pool
  std::unordered_map<int, std::multimap<size_t, Block>> graph_free;  // live graphs' free blocks
};

DevicePool& pool(int device) {
  // One per device, found by index: no lock or lookup before the pool's own. Never destroyed: a
  // CUDA tensor with static storage, or on a thread outliving main(), is freed after
  // function-local statics would be. (Callers have checked the index: DeviceGuard does.)
  static auto* pools = new DevicePool[Device::kMaxCudaDevices];
  return pools[device];
}

// The graph pool this thread is capturing into, on which device (-1: none): a block this thread
// frees during its capture, even one made before it on another stream, may have been read by the
// captured kernels, so the graph keeps it.
thread_local int t_capture_device = -1;
thread_local int t_capture_pool = 0;

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
  int graph = 0;  // the pool of the graph capturing this stream, if one is
  if (!p.capturing.empty())
    if (auto c = p.capturing.find(s); c != p.capturing.end()) graph = c->second;
  // No event queries while a capture runs: the events of a captured stream are not real ones.
  if (!p.held.empty() && p.capturing.empty()) release_held(p, /*wait=*/false);
  // Best fit among cached blocks of this stream (or of the capturing graph's pool), no more than
  // twice the size we need.
  auto& cached = graph != 0 ? p.graph_free[graph] : p.free_blocks;
  for (auto it = cached.lower_bound(size); it != cached.end() && it->first <= 2 * size; ++it) {
    if (graph == 0 && it->second.stream != s) continue;
    Block b = it->second;
    cached.erase(it);
    b.stream = s;
    p.active.emplace(b.ptr, b);
    ::tandem::detail::record_allocation(device, int64_t(nbytes));
    return b.ptr;
  }
  void* ptr = nullptr;
  // cudaMalloc is not stream-ordered, so a capture in progress may count it as unsafe: relaxed
  // for this call (the memory is not part of the graph; only its address is).
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = cudaMalloc(&ptr, size);
  if (err == cudaErrorMemoryAllocation) {  // out of memory: give the cache back, try again
    (void)cudaGetLastError();
    if (p.capturing.empty()) {  // (freeing or waiting is unsafe during a capture)
      release_held(p, /*wait=*/true);
      release_cached(device, p);
      err = cudaMalloc(&ptr, size);
    }
  }
  cudaThreadExchangeStreamCaptureMode(&mode);  // back to what it was
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
  p.active.emplace(ptr, Block{ptr, size, s, {}, graph});
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
  if (b.graph_pool == 0 && !p.capturing.empty()) {
    if (auto c = p.capturing.find(b.stream); c != p.capturing.end()) b.graph_pool = c->second;
    if (t_capture_device == device.index()) b.graph_pool = t_capture_pool;
  }
  if (b.graph_pool != 0) {
    // The graph's kernels use it at each replay (in capture order, on the graph's stream): back
    // to its pool; into the shared cache if the graph is gone.
    b.uses.clear();
    if (auto g = p.graph_free.find(b.graph_pool); g != p.graph_free.end()) {
      g->second.emplace(b.size, b);
      return;
    }
    b.graph_pool = 0;
  }
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

namespace detail {

int new_graph_pool() {
  static std::atomic<int> next{0};
  return ++next;
}

void begin_capture_allocations(int device, cudaStream_t s, int graph_pool) {
  DevicePool& p = pool(device);
  std::lock_guard lk(p.mu);
  p.capturing[s] = graph_pool;
  p.graph_free[graph_pool];  // exists from now until release_graph_pool
  t_capture_device = device;
  t_capture_pool = graph_pool;
}

void end_capture_allocations(int device, cudaStream_t s) noexcept {
  DevicePool& p = pool(device);
  std::lock_guard lk(p.mu);
  p.capturing.erase(s);
  t_capture_device = -1;
  t_capture_pool = 0;
}

void release_graph_pool(int device, int graph_pool) noexcept {
  DevicePool& p = pool(device);
  std::lock_guard lk(p.mu);
  auto g = p.graph_free.find(graph_pool);
  if (g == p.graph_free.end()) return;
  for (auto& [size, b] : g->second) {
    b.graph_pool = 0;
    b.stream = cudaStreamLegacy;  // the graph's stream goes with it
    p.free_blocks.emplace(size, b);
  }
  p.graph_free.erase(g);
}

}  // namespace detail

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
