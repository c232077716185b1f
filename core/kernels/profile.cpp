// core/kernels/profile.cpp — the timed kernel tables: one wrapper per table entry, generated from
// the entry's own signature, that labels the call, times it and calls the plain table's entry.
#include <tandem/core/cuda_device.h>
#include <tandem/core/error.h>
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

// Every entry of struct Kernels, in order; the static_assert below fails when one is added there
// and not here.
// clang-format off
#define TD_KERNEL_ENTRIES(X) \
  X(copy) X(fill) X(arange) X(uniform) X(normal) X(unary) X(binary) X(compare) X(where) \
  X(relu_backward) X(sigmoid_backward) X(tanh_backward) X(gelu_backward) \
  X(gelu_tanh_backward) X(add_scaled) X(addcmul) X(addcdiv) X(reduce_rows) X(reduce_cols) X(square_sums) \
  X(gemm) X(softmax_forward) X(softmax_backward) X(log_softmax_forward) \
  X(log_softmax_backward) X(conv2d_forward) X(conv2d_backward) X(max_pool2d_forward) \
  X(relu_max_pool2d_forward) X(max_pool2d_backward) X(avg_pool2d_forward) \
  X(avg_pool2d_backward) X(cross_entropy_forward) X(cross_entropy_backward) \
  X(nll_loss_forward) X(nll_loss_backward) X(batch_norm_forward) X(batch_norm_backward) \
  X(layer_norm_forward) X(layer_norm_backward) X(embedding_forward) X(embedding_backward) \
  X(attention_forward) X(attention_backward) X(gather) X(scatter_add) X(topk) \
  X(multinomial) X(sgd_step) X(adam_step) X(adam_step_many) X(adam_step_many_unless) \
  X(unscale_grad) X(amp_update_scale)
// clang-format on

#define TD_ONE(entry) +1
static_assert(sizeof(Kernels) == (0 TD_KERNEL_ENTRIES(TD_ONE)) * sizeof(void (*)()),
              "an entry of struct Kernels is missing from TD_KERNEL_ENTRIES");

namespace names {
#define TD_NAME(entry) constexpr char entry[] = #entry;
TD_KERNEL_ENTRIES(TD_NAME)
}  // namespace names

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

// The bytes of memory a tensor argument spans: a broadcast (stride-0) view counts the memory
// behind it, not its logical size.
double span_bytes(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t extent = 1;
  for (size_t d = 0; d < t.shape().size(); ++d)
    extent += (t.shape()[d] - 1) * std::abs(t.strides()[d]);
  return double(std::min(extent, t.numel())) * double(element_size(t.dtype()));
}

// The call's label and its device, from its arguments: the operation of unary/binary/compare/
// reduce kernels, the dtype of the first defined tensor (and the second's for a converting copy).
struct Label {
  std::string text;
  const Tensor* tensors[3] = {nullptr, nullptr, nullptr};  // the first three defined
  double bytes = 0;                                        // every tensor argument's span
  int bools = 0;
  bool first_bool = false;  // gemm's trans_a
};
template <typename T>
void see(Label& l, const T& a) {
  using U = std::remove_cvref_t<T>;
  if constexpr (std::is_same_v<U, UnaryOp> || std::is_same_v<U, BinaryOp> ||
                std::is_same_v<U, CompareOp> || std::is_same_v<U, ReduceOp>) {
    l.text += ' ';
    l.text += name(a);
  } else if constexpr (std::is_same_v<U, bool>) {
    if (l.bools++ == 0) l.first_bool = a;
  } else if constexpr (std::is_same_v<U, Tensor>) {
    if (!a.defined()) return;
    for (const Tensor*& slot : l.tensors)
      if (slot == nullptr) {
        slot = &a;
        break;
      }
    l.bytes += span_bytes(a);
  } else if constexpr (std::is_same_v<U, std::span<const Tensor>>) {
    if (!a.empty() && l.tensors[0] == nullptr) l.tensors[0] = &a.front();
    for (const Tensor& t : a) l.bytes += span_bytes(t);
  } else if constexpr (std::is_same_v<U, std::span<const AdamSlot>>) {
    if (!a.empty() && l.tensors[0] == nullptr) l.tensors[0] = a.front().param;
    for (const AdamSlot& s : a)
      l.bytes += span_bytes(*s.param) + span_bytes(*s.grad) + span_bytes(*s.exp_avg) +
                 span_bytes(*s.exp_avg_sq);
  }
}

// A matrix product's multiply-adds ×2: c [.., M, N] from a [.., M, K] (or [.., K, M] transposed).
double gemm_flops(const Label& l, const char* name) {
  if (std::strcmp(name, "gemm") != 0 || l.tensors[2] == nullptr) return 0;
  const Tensor &a = *l.tensors[0], &c = *l.tensors[2];
  return 2.0 * double(c.numel()) * double(l.first_bool ? a.size(-2) : a.size(-1));
}

// Ends the label with the first floating-point tensor's dtype (embedding_backward's first is its
// int64 ids); a copy's with its source's, then its destination's if they differ.
void add_dtypes(Label& l, const char* name_of_entry) {
  if (l.tensors[0] == nullptr) return;
  const bool copy = std::strcmp(name_of_entry, "copy") == 0;
  const Tensor* shown = l.tensors[0];
  for (const Tensor* t : l.tensors)
    if (!copy && t != nullptr && is_floating(t->dtype())) {
      shown = t;
      break;
    }
  l.text += ' ';
  l.text += name(shown->dtype());
  if (copy && l.tensors[1] != nullptr && l.tensors[1]->dtype() != l.tensors[0]->dtype()) {
    l.text += "->";
    l.text += name(l.tensors[1]->dtype());
  }
}

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
