// core/kernels/profile.cpp — the timed kernel tables: one wrapper per table entry, generated from
// the entry's own signature, that labels the call, times it and calls the plain table's entry.
#include <tandem/core/cuda_device.h>
#include <tandem/core/error.h>
#include <tandem/core/kernels/call_label.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/kernels/profile.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#if TANDEM_WITH_CUDA
#include <tandem/core/cuda/stream.h>
#endif

namespace tandem::kernel_profile {

namespace {

#define TD_NAME(entry) constexpr char entry[] = #entry;
namespace names {
TD_KERNEL_ENTRIES(TD_NAME)
}
#undef TD_NAME

using Clock = std::chrono::steady_clock;

struct Pending {  // a CUDA call, read at stop() when its events have passed
  std::string label;
  double bytes, flops;
#if TANDEM_WITH_CUDA
  std::unique_ptr<cuda::Event> begin, end;
#endif
};

struct State {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Row> rows;  // (label, device): summed so far
  std::vector<Pending> pending;
};
State& state() {
  static State s;
  return s;
}

const Kernels* g_plain[2] = {nullptr, nullptr};  // [0] the CPU's table, [1] CUDA's
thread_local int t_depth = 0;                    // > 0 inside a timed call
// Which start() a call began under: a call still running at stop() that ends after the next
// start() is not counted in the new profile.
std::atomic<uint64_t> g_generation{0};

// Under state().mu: whether a call that began in `generation` is still to be counted.
bool counted(uint64_t generation) {
  return detail::g_active.load() && generation == g_generation.load();
}

// Under state().mu.
void add_locked(const std::string& label, const char* device, double ms, double bytes,
                double flops) {
  Row& r = state().rows[{label, device}];
  r.kernel = label;
  r.device = device;
  ++r.calls;
  r.ms += ms;
  r.bytes += bytes;
  r.flops += flops;
}

void add(uint64_t generation, const std::string& label, const char* device, double ms, double bytes,
         double flops) {
  std::lock_guard lock(state().mu);
  if (counted(generation)) add_locked(label, device, ms, bytes, flops);
}

using kernel_calls::add_dtypes;
using kernel_calls::gemm_flops;
using kernel_calls::Label;
using kernel_calls::see;

template <typename F>
struct Timed;
template <typename... A>
struct Timed<void (*)(A...)> {
  template <int D, auto Member, const char* Name>
  static void call(A... a) {
    const Kernels& plain = *g_plain[D];
    if (t_depth > 0 || !detail::g_active.load(std::memory_order_relaxed)) {
      (plain.*Member)(std::forward<A>(a)...);
      return;
    }
    const uint64_t generation = g_generation.load();
    Label l{Name};
    (see(l, a), ...);
    add_dtypes(l, Name);
    if constexpr (D == 1) {
#if TANDEM_WITH_CUDA
      // The device the kernel runs on: its first CUDA tensor's (a copy from the host has the
      // host's source first).
      const Tensor* on = nullptr;
      for (const Tensor* t : l.tensors)
        if (on == nullptr && t != nullptr && t->device().is_cuda()) on = t;
      const int device = on != nullptr ? on->device().index() : cuda::current_device();
      cuda::DeviceGuard guard(device);  // events belong to the device of the stream they mark
      const cudaStream_t stream = cuda::current_stream(device);
      // While the stream is captured (or the capture broke, or the query failed), events would
      // be graph nodes or errors of the profiler's own: the call runs untimed.
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
        (void)cudaGetLastError();  // the query's error, not the kernel's
        capture = cudaStreamCaptureStatusInvalidated;
      }
      if (capture != cudaStreamCaptureStatusNone) {
        (plain.*Member)(std::forward<A>(a)...);
        return;
      }
      Pending p{std::move(l.text), l.bytes, gemm_flops(l, Name),
                std::make_unique<cuda::Event>(true), std::make_unique<cuda::Event>(true)};
      ++t_depth;
      struct Leave {
        ~Leave() { --t_depth; }
      } leave;
      p.begin->record(stream);
      (plain.*Member)(std::forward<A>(a)...);
      p.end->record(stream);
      std::lock_guard lock(state().mu);
      if (counted(generation)) state().pending.push_back(std::move(p));
#else
      (plain.*Member)(std::forward<A>(a)...);  // no CUDA table to stand in for
#endif
    } else {
      ++t_depth;
      struct Leave {
        ~Leave() { --t_depth; }
      } leave;
      const double flops = gemm_flops(l, Name);
      const auto t0 = Clock::now();
      (plain.*Member)(std::forward<A>(a)...);
      add(generation, l.text, "cpu",
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), l.bytes, flops);
    }
  }
};

template <int D>
Kernels make_timed() {
  Kernels k{};
#define TD_TIMED(entry) \
  k.entry = &Timed<decltype(Kernels::entry)>::template call<D, &Kernels::entry, names::entry>;
  TD_KERNEL_ENTRIES(TD_TIMED)
  return k;
}

}  // namespace

bool active() { return detail::g_active.load(std::memory_order_relaxed); }

void start() {
  std::lock_guard lock(state().mu);
  if (detail::g_active.load())
    tandem::detail::fail<ValueError>("kernel_profile::start(): already started");
  state().rows.clear();
  state().pending.clear();
  g_generation.fetch_add(1);
  detail::g_active.store(true);
}

std::vector<Row> stop() {
  detail::g_active.store(false);
  std::vector<Pending> pending;
  {
    std::lock_guard lock(state().mu);
    pending.swap(state().pending);
  }
  std::vector<double> ms(pending.size());
#if TANDEM_WITH_CUDA
  for (size_t i = 0; i < pending.size(); ++i) {  // outside the lock: calls in flight go on
    pending[i].end->synchronize();
    ms[i] = double(pending[i].begin->elapsed_ms(*pending[i].end));
  }
#endif
  std::vector<Row> rows;
  {
    std::lock_guard lock(state().mu);
    for (size_t i = 0; i < pending.size(); ++i)  // counted when pushed
      add_locked(pending[i].label, "cuda", ms[i], pending[i].bytes, pending[i].flops);
    for (auto& [key, row] : state().rows) rows.push_back(row);
    state().rows.clear();
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  return rows;
}

std::string format(const std::vector<Row>& rows, double whole_ms, size_t limit) {
  double sum = 0;
  for (const Row& r : rows) sum += r.ms;
  const double base = whole_ms > 0 ? whole_ms : sum;
  std::string out;
  char line[256];
  auto share = [&](double ms) { return base > 0 ? 100 * ms / base : 0.0; };
  // GB/s: the bytes the call's tensor arguments span over its time (a floor on what it moved);
  // TFLOP/s: the matrix products' arithmetic.
  auto rates = [](const Row& r, char* buf, size_t n) {
    const double s = r.ms * 1e-3;
    if (s <= 0) return (void)std::snprintf(buf, n, "%9s %9s", "", "");
    char flops[16] = "";
    if (r.flops > 0) std::snprintf(flops, sizeof flops, "%.1f", r.flops / s / 1e12);
    std::snprintf(buf, n, "%9.1f %9s", r.bytes / s / 1e9, flops);
  };
  std::snprintf(line, sizeof line, "%-40s %-6s %8s %11s %7s %9s %9s\n", "kernel", "device", "calls",
                "ms", "share", "GB/s", "TFLOP/s");
  out += line;
  Row rest{"", "", 0, 0};
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i >= limit) {
      rest.calls += rows[i].calls;
      rest.ms += rows[i].ms;
      continue;
    }
    char rate[32];
    rates(rows[i], rate, sizeof rate);
    std::snprintf(line, sizeof line, "%-40s %-6s %8lld %11.3f %6.1f%% %s\n", rows[i].kernel.c_str(),
                  rows[i].device.c_str(), (long long)rows[i].calls, rows[i].ms, share(rows[i].ms),
                  rate);
    out += line;
  }
  if (rest.calls > 0) {
    std::snprintf(line, sizeof line, "%-40s %-6s %8lld %11.3f %6.1f%%\n",
                  ("(" + std::to_string(rows.size() - limit) + " more)").c_str(), "",
                  (long long)rest.calls, rest.ms, share(rest.ms));
    out += line;
  }
  std::snprintf(line, sizeof line, "%-40s %-6s %8s %11.3f %6.1f%%\n", "all kernels", "", "", sum,
                share(sum));
  out += line;
  return out;
}

const Kernels& detail::timed(const Kernels& plain, Device device) {
  const int d = device.is_cuda() ? 1 : 0;
  // Built once per device type; the plain table is the same every time for a type.
  static const Kernels tables[2] = {make_timed<0>(), make_timed<1>()};
  static std::once_flag once[2];
  std::call_once(once[d], [&] { g_plain[d] = &plain; });
  return tables[d];
}

}  // namespace tandem::kernel_profile
