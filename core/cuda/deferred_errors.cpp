// core/cuda/deferred_errors.cpp — the registry of index flags read at the next sync point
// (deferred_errors.h says why). Flags are read on a private stream after waiting for the event
// recorded behind their kernel, so reading one waits for that kernel only, never for the work
// queued after it, and never for the whole device.
#include <cuda_runtime.h>
#include <tandem/core/check.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/deferred_errors.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/core/cuda_device.h>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

namespace tandem::cuda {
namespace {

// A training loop that never syncs (CUDA graphs, no logging) must not grow the list without end:
// past this many, flags whose kernels are done are read when the next one is registered.
constexpr size_t kReadFinishedAbove = 64;
// ... and past this many, the oldest is waited for (a bounded stall, counted as a host sync).
constexpr size_t kWaitAbove = 4096;

struct Check {
  Tensor flag, indices;
  DescribeBadIndex describe;
  cudaEvent_t done = nullptr;
};

struct Registry {
  std::mutex mu;
  std::deque<Check> checks;
  std::vector<cudaEvent_t> spare;  // events of read checks, reused: a loss call each step
  // Created on first use, never destroyed (as the allocator's pools).
  cudaStream_t reader = nullptr;
};

Registry& registry(int device) {
  static auto* registries = new Registry[Device::kMaxCudaDevices];
  return registries[device];
}

// Reads one flag after its kernel (on the registry's device, under its lock). nullopt: no error.
std::optional<std::string> read(Registry& r, Check& c) {
  if (!r.reader) TD_CUDA_CHECK(cudaStreamCreateWithFlags(&r.reader, cudaStreamNonBlocking));
  TD_CUDA_CHECK(cudaStreamWaitEvent(r.reader, c.done, 0));
  unsigned long long at = ~0ull;
  TD_CUDA_CHECK(
      cudaMemcpyAsync(&at, c.flag.data_ptr(), sizeof at, cudaMemcpyDeviceToHost, r.reader));
  TD_CUDA_CHECK(cudaStreamSynchronize(r.reader));
  if (at == ~0ull) return std::nullopt;
  int64_t value = 0;
  TD_CUDA_CHECK(cudaMemcpyAsync(&value, c.indices.data<int64_t>() + at, sizeof value,
                                cudaMemcpyDeviceToHost, r.reader));
  TD_CUDA_CHECK(cudaStreamSynchronize(r.reader));
  return c.describe(int64_t(at), value);
}

void drop(Registry& r, Check& c) { r.spare.push_back(c.done); }

// Reads and drops checks from the front while `ready` says so; throws the first error found.
template <typename Ready>
void read_front(Registry& r, Ready ready) {
  std::optional<std::string> error;
  while (!r.checks.empty() && ready(r.checks.front())) {
    Check c = std::move(r.checks.front());
    r.checks.pop_front();
    if (!error) error = read(r, c);
    drop(r, c);
    if (error) break;
  }
  if (!error) return;
  // The first error wins; the rest describe work that ran after a fault the caller must handle.
  for (Check& c : r.checks) drop(r, c);
  r.checks.clear();
  ::tandem::detail::fail<IndexError>(*error);
}

}  // namespace

void defer_index_check(const Tensor& flag, const Tensor& indices, DescribeBadIndex describe) {
  const int device = flag.device().index();
  // A captured kernel's flag would be read once, not after each replay, and a captured event
  // cannot be queried: inside a CUDA graph bad indices go unreported (core/cuda/graph.h says so).
  if (is_capturing(device)) return;
  Registry& r = registry(device);
  DeviceGuard guard(device);
  Check c{flag, indices, std::move(describe), nullptr};
  std::lock_guard lk(r.mu);
  if (!r.spare.empty()) {
    c.done = r.spare.back();
    r.spare.pop_back();
  } else {
    TD_CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
  }
  r.checks.push_back(std::move(c));  // owned by the registry before the record can throw
  TD_CUDA_CHECK(cudaEventRecord(r.checks.back().done, current_stream(device)));
  if (r.checks.size() > kReadFinishedAbove) {
    read_front(r, [](const Check& f) {
      const cudaError_t q = cudaEventQuery(f.done);
      if (q == cudaErrorNotReady) (void)cudaGetLastError();
      return q == cudaSuccess;
    });
  }
  if (r.checks.size() > kWaitAbove) {
    note_host_sync("reading the oldest of 4,096 pending index checks");
    size_t n = 1;
    read_front(r, [&n](const Check&) { return n-- > 0; });
  }
}

void raise_deferred_errors(int device) {
  Registry& r = registry(device);
  std::lock_guard lk(r.mu);
  if (r.checks.empty()) return;
  DeviceGuard guard(device);
  read_front(r, [](const Check&) { return true; });
}

size_t deferred_checks(int device) {
  Registry& r = registry(device);
  std::lock_guard lk(r.mu);
  return r.checks.size();
}

}  // namespace tandem::cuda
