// core/cuda/device.cpp — device counting and the small device API. cudaGetDeviceCount returns
// cudaErrorInsufficientDriver (35) with no driver and cudaErrorNoDevice (100) with no GPU; both
// mean zero, and the sticky error is cleared so later calls do not see it.
#include <tandem/core/check.h>
#include <tandem/core/cuda_device.h>
#include <atomic>
#include <cstdlib>

#if TANDEM_WITH_CUDA
#include <cuda_runtime.h>
#include <cudnn.h>
#include <tandem/core/cuda/check.h>
#include <tandem/core/cuda/deferred_errors.h>
#include <tandem/core/kernels/cuda/cublas.h>
#endif

namespace tandem::cuda {

namespace {
std::atomic<bool> g_deterministic_convolutions{true};
std::atomic<bool> g_cudnn_benchmark{false};
}  // namespace
void set_deterministic_convolutions(bool on) { g_deterministic_convolutions = on; }
bool deterministic_convolutions() { return g_deterministic_convolutions; }
void set_cudnn_benchmark(bool on) { g_cudnn_benchmark = on; }
bool cudnn_benchmark() { return g_cudnn_benchmark; }

int device_count() {
#if TANDEM_WITH_CUDA
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    return n;
  }();
  return count;
#else
  return 0;
#endif
}

void check_device(Device device) {
  if (!device.is_cuda()) return;
  const int n = device_count();
  if (device.index() < n) return;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  ::tandem::detail::fail<DeviceError>(
      device, " requested but ",
      n == 0 ? std::string(TANDEM_HAS_CUDA ? "no CUDA device is visible"
                                           : "this build of Tandem has no CUDA")
             : str("only ", n, " CUDA device", n == 1 ? " is" : "s are", " visible"),
      " (CUDA_VISIBLE_DEVICES=", visible ? (*visible ? visible : "<empty>") : "<unset>", ")",
      "\n  hint: devices are numbered from 0 among the visible ones; `tandem devices` lists them");
}

#if TANDEM_WITH_CUDA

std::string device_name(int index) {
  check_device(Device::cuda(index));
  cudaDeviceProp p{};
  TD_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return p.name;
}

MemoryInfo memory_info(int index) {
  DeviceGuard guard(index);
  MemoryInfo m;
  TD_CUDA_CHECK(cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
  return m;
}

int current_device() {
  int d = 0;
  if (device_count() == 0) return 0;
  TD_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  check_device(Device::cuda(index));
  TD_CUDA_CHECK(cudaSetDevice(index));
}

LibraryVersions library_versions() {
  LibraryVersions v;
  cudaRuntimeGetVersion(&v.runtime);
  cudaDriverGetVersion(&v.driver);
  v.cudnn = int(cudnnGetVersion());
  try {
    int major = 0, minor = 0, patch = 0;
    const Cublas& c = cublas();
    c.GetProperty(MAJOR_VERSION, &major);
    c.GetProperty(MINOR_VERSION, &minor);
    c.GetProperty(PATCH_LEVEL, &patch);
    v.cublas = major * 10000 + minor * 100 + patch;
  } catch (const Error&) {  // no cuBLAS to open: say 0
  }
  return v;
}

void synchronize(int index) {
  DeviceGuard guard(index);
  TD_CUDA_CHECK(cudaDeviceSynchronize());
  raise_deferred_errors(index);  // a bad index found by a kernel surfaces here at the latest
}

DeviceGuard::DeviceGuard(int index) {
  if (index < 0) return;
  check_device(Device::cuda(index));
  int current = 0;
  TD_CUDA_CHECK(cudaGetDevice(&current));
  if (current == index) return;
  TD_CUDA_CHECK(cudaSetDevice(index));
  previous_ = current;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

#else  // a build without CUDA: there is never a device to query

std::string device_name(int index) {
  check_device(Device::cuda(index));
  return "";
}
MemoryInfo memory_info(int index) {
  check_device(Device::cuda(index));
  return {};
}
int current_device() { return 0; }
void set_device(int index) { check_device(Device::cuda(index)); }
void synchronize(int index) { check_device(Device::cuda(index)); }
size_t deferred_checks(int) { return 0; }
LibraryVersions library_versions() { return {}; }
void* current_stream_handle(int) { return nullptr; }
StreamHandleGuard::StreamHandleGuard(int device, void*) : device_(device) {}
StreamHandleGuard::~StreamHandleGuard() = default;
void stream_wait(int, void*, void*) {}
StreamFence StreamFence::record() { return {}; }
StreamFence::~StreamFence() = default;
StreamFence::StreamFence(StreamFence&&) noexcept = default;
StreamFence& StreamFence::operator=(StreamFence&&) noexcept = default;
void StreamFence::wait() const {}
DeviceGuard::DeviceGuard(int index) {
  if (index >= 0) check_device(Device::cuda(index));
}
DeviceGuard::~DeviceGuard() = default;

#endif

}  // namespace tandem::cuda
