// tools/devices.cpp — `tandem devices [--csv|--json]`: what this machine offers Tandem, in the
// spirit of `nvidia-smi -L` (reference §4.3). One line per visible CUDA device — or the reason
// there is none — then the CPU with its vector extensions (read by CPUID at run time) and its
// virtual devices cpu:0…cpu:63, the intra-op thread count and CUDA_VISIBLE_DEVICES as this
// process sees it. Always exits 0: "no GPU" is an answer.
#include <tandem/core/cpu_info.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/device.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/memory_stats.h>
#include <tandem/core/thread_pool.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>
#if TANDEM_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

#include "commands.h"

namespace tandem::tools {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct GpuInfo {
  std::string device, name, uuid;
  int major = 0, minor = 0;
  double total_gib = 0, used_gib = 0;
};

struct CudaReport {
  std::vector<GpuInfo> gpus;
  std::string reason;           // why there are none
  int runtime = 0, driver = 0;  // versions as 1000·major + 10·minor
};

CudaReport query_cuda() {
  CudaReport r;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
#if TANDEM_HAS_CUDA
  cudaRuntimeGetVersion(&r.runtime);
  cudaDriverGetVersion(&r.driver);  // 0 when no driver is installed
  const int n = cuda::device_count();
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    GpuInfo g{.device = "cuda:" + std::to_string(i),
              .name = p.name,
              .uuid = "GPU-",
              .major = p.major,
              .minor = p.minor,
              .total_gib = double(p.totalGlobalMem) / kGiB};
    for (int b = 0; b < 16; ++b) {  // 8-4-4-4-12 hex digits, as nvidia-smi prints it
      char hex[4];
      std::snprintf(hex, sizeof hex, "%02x", unsigned(static_cast<unsigned char>(p.uuid.bytes[b])));
      g.uuid += hex;
      if (b == 3 || b == 5 || b == 7 || b == 9) g.uuid += '-';
    }
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
      g.used_gib = double(total_bytes - free_bytes) / kGiB;
    r.gpus.push_back(g);
  }
  (void)cudaGetLastError();
  if (n == 0) {
    const bool hidden = visible != nullptr && *visible == '\0';
    r.reason = std::string("no CUDA device visible (") +
               (hidden          ? "CUDA_VISIBLE_DEVICES is empty"
                : r.driver == 0 ? "no CUDA driver"
                                : "no GPU, or CUDA_VISIBLE_DEVICES names none that exist") +
               ")";
  }
#else
  (void)visible;
  r.reason = "this build has no CUDA (configured with TANDEM_WITH_CUDA=OFF, or nvcc was not found)";
#endif
  return r;
}

struct HostInfo {
  std::string model;
  std::vector<std::string> extensions;  // AVX2, AVX-512, AVX512-BF16, AMX-TILE, ...
  unsigned threads = 0;
  double memory_gib = 0;
};

HostInfo query_cpu() {
  HostInfo c{.model = cpu_info().model, .extensions = cpu_info().extensions()};
  c.threads = std::thread::hardware_concurrency();
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kib = 0;
    meminfo >> kib;
    if (key == "MemTotal:") {
      c.memory_gib = kib * 1024 / kGiB;
      break;
    }
    meminfo.ignore(256, '\n');
  }
  return c;
}

std::string version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

}  // namespace

int run_devices(const DevicesOptions& o) {
  const CudaReport cuda = query_cuda();
  const HostInfo cpu = query_cpu();
  const MemoryStats mem = memory_stats(Device::cpu());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  const int threads = get_num_threads();
  const char* env_threads = std::getenv("TANDEM_NUM_THREADS");

  if (o.json) {
    nlohmann::ordered_json j, gpus = nlohmann::ordered_json::array();
    for (const GpuInfo& g : cuda.gpus)
      gpus.push_back(
          {{"device", g.device},
           {"name", g.name},
           {"compute_capability", std::to_string(g.major) + "." + std::to_string(g.minor)},
           {"memory_total_gib", g.total_gib},
           {"memory_used_gib", g.used_gib},
           {"uuid", g.uuid}});
    j["cuda"] = {{"devices", gpus},
                 {"reason", cuda.reason},
                 {"runtime_version", cuda.runtime ? version(cuda.runtime) : ""},
                 {"driver_version", cuda.driver ? version(cuda.driver) : ""}};
    j["cpu"] = {{"device", "cpu"},
                {"name", cpu.model},
                {"threads", cpu.threads},
                {"vector_extensions", cpu.extensions},
                {"memory_total_gib", cpu.memory_gib},
                {"virtual_devices", Device::kMaxCpuDevices},
                {"intra_op_threads", threads},
                {"matmul_float32", cpu_gemm_path(DType::f32)},
                {"matmul_bfloat16", cpu_gemm_path(DType::bf16)},
                {"matmul_float16", cpu_gemm_path(DType::f16)},
                {"conv_float32", cpu_conv_path(DType::f32)},
                {"conv_bfloat16", cpu_conv_path(DType::bf16)},
                {"conv_float16", cpu_conv_path(DType::f16)},
                {"allocated_bytes", mem.allocated_bytes},
                {"peak_allocated_bytes", mem.peak_allocated_bytes}};
    j["cuda_visible_devices"] = visible ? nlohmann::ordered_json(visible) : nullptr;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (o.csv) {
    std::printf("device,name,compute_capability,threads,memory_total_gib,memory_used_gib,uuid\n");
    for (const GpuInfo& g : cuda.gpus)
      std::printf("%s,\"%s\",%d.%d,,%.1f,%.1f,%s\n", g.device.c_str(), g.name.c_str(), g.major,
                  g.minor, g.total_gib, g.used_gib, g.uuid.c_str());
    std::printf("cpu,\"%s\",,%u,%.1f,,\n", cpu.model.c_str(), cpu.threads, cpu.memory_gib);
    return 0;
  }

  for (const GpuInfo& g : cuda.gpus)
    std::printf("%s  %s  sm_%d%d  %.1f GiB total  %.1f GiB used  UUID %s\n", g.device.c_str(),
                g.name.c_str(), g.major, g.minor, g.total_gib, g.used_gib, g.uuid.c_str());
  if (cuda.gpus.empty()) std::printf("%s\n", cuda.reason.c_str());
  std::printf("cpu  %s  %u threads  %.1f GiB\n", cpu.model.c_str(), cpu.threads, cpu.memory_gib);
  std::string ext;
  for (const std::string& e : cpu.extensions) ext += (ext.empty() ? "" : " ") + e;
  std::printf("  vector extensions: %s\n", ext.empty() ? "none beyond SSE (no AVX2)" : ext.c_str());
  // Which kernel a matrix product gets here: oneDNN picks one from the CPU at run time.
  std::printf("  float32 matmul: %s\n", cpu_gemm_path(DType::f32).c_str());
  std::printf("  bfloat16 matmul: %s\n", cpu_gemm_path(DType::bf16).c_str());
  std::printf("  float16 matmul: %s\n", cpu_gemm_path(DType::f16).c_str());
  std::printf("  float32 convolution: %s\n", cpu_conv_path(DType::f32).c_str());
  std::printf("  bfloat16 convolution: %s\n", cpu_conv_path(DType::bf16).c_str());
  std::printf("  float16 convolution: %s\n", cpu_conv_path(DType::f16).c_str());
  std::printf(
      "  virtual devices cpu:0 … cpu:%d available (each with its own memory statistics "
      "and generator)\n",
      Device::kMaxCpuDevices - 1);
  std::printf("  intra-op threads: %d (%s)\n", threads,
              env_threads ? ("TANDEM_NUM_THREADS=" + std::string(env_threads)).c_str()
                          : "TANDEM_NUM_THREADS unset: all cores");
  if (mem.allocated_bytes != 0 || mem.peak_allocated_bytes != 0)
    std::printf("  memory on cpu: %.1f MiB allocated, %.1f MiB peak, %lld live allocations\n",
                double(mem.allocated_bytes) / (1 << 20),
                double(mem.peak_allocated_bytes) / (1 << 20), (long long)mem.active_allocations);
  if (cuda.runtime != 0)
    std::printf("CUDA runtime %s, driver %s\n", version(cuda.runtime).c_str(),
                cuda.driver ? version(cuda.driver).c_str() : "none");
  std::printf("CUDA_VISIBLE_DEVICES: %s\n", visible ? (*visible ? visible : "(empty)") : "(unset)");
  return 0;
}

}  // namespace tandem::tools
