// parallel/comm/blocked_time.cpp — see blocked_time.h.
#include <tandem/parallel/comm/blocked_time.h>

#include <atomic>
#include <mutex>

namespace tandem::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int64_t> g_blocked_ns{0};
std::atomic<bool> g_recording{false};
std::mutex g_spans_mu;
std::vector<BlockedSpan> g_spans;  // under g_spans_mu

double seconds(Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

double blocked_seconds() { return double(g_blocked_ns.load()) * 1e-9; }

double blocked_clock() { return seconds(Clock::now()); }

void record_blocked_spans(bool on) {
  std::lock_guard lk(g_spans_mu);
  if (on) g_spans.clear();
  g_recording.store(on);
}

std::vector<BlockedSpan> blocked_spans() {
  std::lock_guard lk(g_spans_mu);
  return g_spans;
}

namespace detail {
void note_blocked(Clock::time_point from, Clock::time_point to) {
  g_blocked_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
  if (!g_recording.load(std::memory_order_relaxed)) return;
  std::lock_guard lk(g_spans_mu);
  if (g_recording.load()) g_spans.push_back({seconds(from), seconds(to)});
}
}  // namespace detail

}  // namespace tandem::parallel
