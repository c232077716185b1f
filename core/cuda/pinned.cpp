// core/cuda/pinned.cpp — page-locked host tensors. A copy from pinned memory to a GPU is a direct
// DMA at full PCIe/NVLink-C2C speed; from pageable memory the driver first copies into a pinned
// staging buffer. The DataLoader pins batches when asked (DataLoaderOptions::pin_memory).
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/storage.h>
#include <tandem/core/tensor.h>
#include <algorithm>
#include <map>
#include <mutex>

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#include <tandem/core/cuda/check.h>
#endif

namespace tandem::cuda {
namespace {
thread_local bool t_non_blocking = false;

#if TANDEM_WITH_CUDA
// Freed pinned blocks kept for reuse, by exact size: a DataLoader pins every batch, and
// cudaHostAlloc is slow while cudaFreeHost synchronises the whole device, which would undo the
// asynchronous upload pinning is for (and put a host sync in a training step). So a freed block
// is always cached, as PyTorch's host allocator does, and only empty_pinned_cache() gives blocks
// back. A block comes back only when its storage dies, and a non-blocking copy keeps its source's
// storage alive until the copy is done (kernels/cuda/copy.cu). Never destroyed (a tensor with
// static storage is freed after function-local statics would be).
struct PinnedCache {
  std::mutex mu;
  std::multimap<size_t, void*> free;
  size_t cached = 0;
};
PinnedCache& pinned_cache() {
  static auto* cache = new PinnedCache;
  return *cache;
}

void* take_pinned(size_t bytes) {
  PinnedCache& c = pinned_cache();
  {
    std::lock_guard lk(c.mu);
    if (auto it = c.free.find(bytes); it != c.free.end()) {
      void* p = it->second;
      c.free.erase(it);
      c.cached -= bytes;
      return p;
    }
  }
  void* p = nullptr;
  TD_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void give_back_pinned(void* p, size_t bytes) {
  PinnedCache& c = pinned_cache();
  std::lock_guard lk(c.mu);
  c.free.emplace(bytes, p);
  c.cached += bytes;
}
#endif
}  // namespace

NonBlockingCopies::NonBlockingCopies() : previous_(t_non_blocking) { t_non_blocking = true; }
NonBlockingCopies::~NonBlockingCopies() { t_non_blocking = previous_; }
bool non_blocking_copies() { return t_non_blocking; }
void set_non_blocking_copies(bool on) { t_non_blocking = on; }

size_t pinned_cache_bytes() {
#if TANDEM_WITH_CUDA
  PinnedCache& c = pinned_cache();
  std::lock_guard lk(c.mu);
  return c.cached;
#else
  return 0;
#endif
}

void empty_pinned_cache() {
#if TANDEM_WITH_CUDA
  PinnedCache& c = pinned_cache();
  std::lock_guard lk(c.mu);
  for (auto& [bytes, p] : c.free) cudaFreeHost(p);  // each waits for the device: asked for
  c.free.clear();
  c.cached = 0;
#endif
}

bool is_pinned(const Tensor& t) {
#if TANDEM_WITH_CUDA
  if (!t.defined() || !t.device().is_cpu() || !is_available()) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, t.data_ptr()) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
#else
  (void)t;
  return false;
#endif
}

Tensor pin_memory(const Tensor& t) {
  TD_CHECK_DEVICE(t.device().is_cpu(), "pin_memory: expected a CPU tensor, but got one on ",
                  t.device());
#if TANDEM_WITH_CUDA
  if (!is_available() || is_pinned(t)) return t;  // nothing to pin for, or already pinned
  const size_t n = size_t(t.numel()) * element_size(t.dtype());
  const size_t bytes = std::max<size_t>(n, 1);
  void* p = take_pinned(bytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(t.device(), p, n, [bytes](void* q) { give_back_pinned(q, bytes); });
  impl->shape = t.shape();
  impl->strides = contiguous_strides(t.shape());
  impl->dtype = t.dtype();
  Tensor out(std::move(impl));
  kernels(Device::cpu()).copy(t, out);  // the CPU copy kernel takes any layout of t
  return out;
#else
  return t;  // no CUDA: pinning would buy nothing
#endif
}

}  // namespace tandem::cuda
