// core/trace.cpp — an in-memory list of events under a mutex (events are few: one per op or
// collective, not per element), written out as Chrome's "X" (complete) and "i" (instant) events.
#include <sys/syscall.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <unistd.h>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

namespace tandem::trace {
namespace {

struct Event {
  std::string name;
  const char* category;
  char phase;  // 'X' span, 'i' instant
  int64_t ts, dur;
  int64_t tid;
};

std::mutex g_mu;
std::vector<Event> g_events;
std::map<int64_t, std::string> g_thread_names;  // kept apart from events: clear() keeps them
int g_pid = 0;
std::string g_process_name;

int64_t thread_id() {
  thread_local const int64_t tid = int64_t(::syscall(SYS_gettid));  // one syscall per thread
  return tid;
}

const auto g_epoch = std::chrono::steady_clock::now();

}  // namespace

void enable(bool on) { detail::g_enabled.store(on); }

void clear() {
  std::lock_guard lk(g_mu);
  g_events.clear();
}

void set_process(int pid, const std::string& name) {
  std::lock_guard lk(g_mu);
  g_pid = pid;
  g_process_name = name;
}

void set_thread_name(const std::string& name) {
  const int64_t tid = thread_id();
  std::lock_guard lk(g_mu);
  g_thread_names[tid] = name;
}

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                               g_epoch)
      .count();
}

void record(std::string name, const char* category, int64_t start_us, int64_t end_us) {
  const int64_t tid = thread_id();
  std::lock_guard lk(g_mu);
  g_events.push_back({std::move(name), category, 'X', start_us, end_us - start_us, tid});
}

void instant(std::string name, const char* category) {
  if (!enabled()) return;
  const int64_t tid = thread_id(), ts = now_us();
  std::lock_guard lk(g_mu);
  g_events.push_back({std::move(name), category, 'i', ts, 0, tid});
}

size_t write_chrome_trace(const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  std::lock_guard lk(g_mu);
  if (!g_process_name.empty())
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", g_pid},
                      {"args", {{"name", g_process_name}}}});
  for (const auto& [tid, name] : g_thread_names)
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", g_pid},
                      {"tid", tid},
                      {"args", {{"name", name}}}});
  for (const Event& e : g_events) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"ph", std::string(1, e.phase)},
                        {"ts", e.ts},     {"pid", g_pid},      {"tid", e.tid}};
    if (e.phase == 'X') j["dur"] = e.dur;
    if (e.phase == 'i') j["s"] = "t";
    events.push_back(std::move(j));
  }
  std::ofstream out(path);
  TD_CHECK_AS(ValueError, out.good(), "write_chrome_trace: cannot write '", path, "'");
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  TD_CHECK_AS(ValueError, out.good(), "write_chrome_trace: error writing '", path, "'");
  return g_events.size();
}

}  // namespace tandem::trace
