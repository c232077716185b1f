// core/trace.h — spans for a Chrome-trace timeline (open the JSON in Perfetto or
// chrome://tracing). Off by default and nearly free then (one relaxed atomic load). When on,
// the autograd engine records every backward op and DDP's communication thread every bucket
// all-reduce, each on its own thread's track, so the overlap of backward and communication is
// visible. One file per process: parallel code names it after the rank.
//   trace::enable();  ...train...;  trace::write_chrome_trace("trace-rank0.json");
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace tandem::trace {

namespace detail {
inline std::atomic<bool> g_enabled{false};
}

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
/// Starts (or stops) recording; clear() drops what was recorded.
void enable(bool on = true);
void clear();
/// Names this process in the trace ("rank 1"); `pid` is the process's row (the rank).
void set_process(int pid, const std::string& name);
/// Names the calling thread's track ("backward", "gloo comm").
void set_thread_name(const std::string& name);

/// Microseconds on the trace clock (steady, shared by all threads).
int64_t now_us();
/// Records a finished span on the calling thread's track.
void record(std::string name, const char* category, int64_t start_us, int64_t end_us);
/// Records an instant event (a point on the calling thread's track).
void instant(std::string name, const char* category);

/// Records the lifetime of the scope as a span, when tracing is on.
class Scope {
 public:
  Scope(const char* category, std::string name)
      : on_(enabled()),
        category_(category),
        name_(on_ ? std::move(name) : std::string()),
        start_(on_ ? now_us() : 0) {}
  ~Scope() {
    if (on_) record(std::move(name_), category_, start_, now_us());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool on_;
  const char* category_;
  std::string name_;
  int64_t start_;
};

/// Writes everything recorded so far as Chrome trace JSON ({"traceEvents": [...]}) to `path`.
/// Returns the number of events written.
size_t write_chrome_trace(const std::string& path);

}  // namespace tandem::trace
