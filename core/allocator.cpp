// core/allocator.cpp — the CPU allocator, and the switch to the CUDA one. Tiny blocks go straight
// to aligned_alloc. Blocks of 4 KiB and more are cached per device in size classes (each power
// of two split in four, so at most 25 % is wasted): glibc returns such blocks to the kernel on
// free, and every new tensor of that size would page-fault all its memory again (5× slower
// elementwise ops on 64 MB tensors, measured in bench/elementwise_bench). This is what a CUDA
// caching allocator does for cudaMalloc, applied to the host.
#include <tandem/core/allocator.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/memory_stats.h>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tandem {

#if TANDEM_WITH_CUDA
namespace cuda {
void* allocate(Device device, size_t nbytes);  // core/cuda/allocator.cu
void deallocate(Device device, void* ptr, size_t nbytes) noexcept;
void empty_cache(Device device) noexcept;
}  // namespace cuda
#endif

namespace {

constexpr size_t kCacheMin = size_t(4) << 10;  // smaller blocks are cheap for malloc itself

// Rounds a large request up to its size class: 4 classes per power of two.
size_t size_class(size_t n) {
  if (n < kCacheMin) return (n + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  size_t top = size_t(1) << (63 - __builtin_clzll(n));  // largest power of two <= n
  const size_t step = top / 4;
  return (n + step - 1) / step * step;
}

// Free blocks by size class, one cache per virtual CPU device (so memory_stats stays per device).
struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
};

// Never destroyed: a tensor freed during static destruction (a global, a thread's cache) must
// still find its cache, and the blocks it holds stay reachable, so LeakSanitizer sees no leak.
Cache& cache(Device d) {
  static Cache* const caches = new Cache[Device::kMaxCpuDevices];
  return caches[d.index()];
}

// A meta allocation's place: an address no memory is behind (above the 47 bits a process's
// memory uses on x86-64 and arm64, so never a real one), distinct from every other meta
// allocation's, so that code which compares places (does this gradient already sit in its
// bucket? do these tensors overlap?) runs the same on meta. Tensor::data_ptr() refuses meta
// tensors: nothing reads or writes through it. 2^62 bytes of places before one repeats.
void* meta_address(size_t nbytes) {
  static std::atomic<uint64_t> next{0};
  const uint64_t at = next.fetch_add((nbytes + 63) & ~uint64_t(63)) % (uint64_t(1) << 62);
  return reinterpret_cast<void*>((uint64_t(1) << 62) + at);
}

}  // namespace

void* allocate(Device device, size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (device.is_meta()) {  // counted, not allocated: no memory, no values
    detail::record_allocation(device, int64_t(nbytes));
    return meta_address(nbytes);
  }
  if (device.is_cuda()) {
    cuda::check_device(device);  // "cuda:3 requested but only 1 CUDA device is visible (...)"
#if TANDEM_WITH_CUDA
    return cuda::allocate(device, nbytes);
#else
    detail::fail<DeviceError>(
        "cannot allocate on ", device,
        ": this build of Tandem has no CUDA (configured with TANDEM_WITH_CUDA=OFF)");
#endif
  }
  const size_t rounded = size_class(nbytes);
  void* p = nullptr;
  if (rounded >= kCacheMin) {
    Cache& c = cache(device);
    std::lock_guard lk(c.mu);
    auto it = c.free_blocks.find(rounded);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    }
  }
  if (p == nullptr) {
    p = std::aligned_alloc(kCpuAlignment, rounded);
    TD_CHECK_AS(DeviceError, p != nullptr, "out of memory: could not allocate ", nbytes,
                " bytes on ", device, " (", memory_stats(device).reserved_bytes,
                " bytes reserved; empty_cache(device) returns cached blocks)");
    detail::record_reserved(device, int64_t(rounded));
  }
  detail::record_allocation(device, int64_t(nbytes));
  return p;
}

void deallocate(Device device, void* ptr, size_t nbytes) noexcept {
  if (device.is_meta()) {
    if (nbytes > 0) detail::record_free(device, int64_t(nbytes));
    return;
  }
  if (ptr == nullptr) return;
  if (device.is_cuda()) {
#if TANDEM_WITH_CUDA
    cuda::deallocate(device, ptr, nbytes);
#endif
    return;
  }
  detail::record_free(device, int64_t(nbytes));
  const size_t rounded = size_class(nbytes);
  if (rounded >= kCacheMin) {
    Cache& c = cache(device);
    std::lock_guard lk(c.mu);
    c.free_blocks[rounded].push_back(ptr);  // stays reserved until empty_cache()
    return;
  }
  std::free(ptr);
  detail::record_reserved(device, -int64_t(rounded));
}

void empty_cache(Device device) {
  if (device.is_meta()) return;  // nothing cached
  if (device.is_cuda()) {
#if TANDEM_WITH_CUDA
    cuda::empty_cache(device);
#endif
    return;
  }
  Cache& c = cache(device);
  std::lock_guard lk(c.mu);
  for (auto& [size, blocks] : c.free_blocks) {
    for (void* p : blocks) std::free(p);
    detail::record_reserved(device, -int64_t(size * blocks.size()));
  }
  c.free_blocks.clear();
}

}  // namespace tandem
