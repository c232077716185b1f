// bench/bench_util.h — what both benchmarks share: argv flags, a clock, calibrated timing of a
// callable, medians, and a warning when other processes are loading the (2-core) machine.
#pragma once

#include <tandem/core/cpu_info.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace bench {

struct Args {
  int rounds;
  bool quick = false;
};

// --cpu-clock times with the process's CPU clock instead of the wall clock. On a machine that
// others are loading, that still measures one thread's work fairly (time spent descheduled is not
// counted); with 2 threads it counts core-seconds, including any spinning, so it is not a speed.
inline bool g_cpu_clock = false;

/// Parses `--rounds N`, `--quick` and `--cpu-clock`; exits with a usage line on anything else.
inline Args parse_args(int argc, char** argv, int default_rounds) {
  Args args{default_rounds};
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      args.quick = true;
    } else if (std::strcmp(argv[i], "--cpu-clock") == 0) {
      g_cpu_clock = true;
    } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      args.rounds = std::atoi(argv[++i]);
      rounds_given = true;
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N] [--quick] [--cpu-clock]\n", argv[0]);
      std::exit(2);
    }
  }
  if (args.quick && !rounds_given) args.rounds = 3;
  if (args.rounds < 1) {
    std::fprintf(stderr, "--rounds must be at least 1\n");
    std::exit(2);
  }
  return args;
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Seconds per call of f, timed over `reps` back-to-back calls.
template <typename F>
double time_per_call(F&& f, int reps) {
  const double t0 = now_s();
  for (int i = 0; i < reps; ++i) f();
  return (now_s() - t0) / reps;
}

/// Warms f up (caches, page faults, lazily started thread pools) and returns how many calls make
/// one sample of about `target_s`: single calls of sub-millisecond ops are too noisy to time.
template <typename F>
int calibrate(F&& f, double target_s) {
  f();
  f();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) best = std::min(best, time_per_call(f, 1));
  return std::max(1, int(std::ceil(target_s / std::max(best, 1e-9))));
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Median milliseconds of `calls` single calls of f, after `warmup` calls (whole training steps
/// and layers: long enough to time one by one, and the median drops the descheduled ones).
template <typename F>
double median_call_ms(int warmup, int calls, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < calls; ++i) t.push_back(time_per_call(f, 1) * 1e3);
  return median(t);
}

/// The processor and its vector extensions: our machines differ (Intel Xeon with AMX, AMD Zen 4),
/// and a ratio means little without the CPU it was measured on.
inline void report_cpu() { std::printf("CPU: %s\n", tandem::cpu_info().summary().c_str()); }

/// The CPU, then the load: every other runnable process takes a core from us on this 2-core
/// machine, so say so up front.
inline void report_load() {
  report_cpu();
  double load1 = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load1) != 1) load1 = 0;
    std::fclose(f);
  }
  std::printf("load average (1 min) at start: %.2f%s\n", load1,
              load1 > 0.5 ? "  -- WARNING: the machine is busy; timings are unreliable" : "");
  if (g_cpu_clock) std::printf("timing with the process CPU clock (--cpu-clock)\n");
}

}  // namespace bench
