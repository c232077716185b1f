// tools/plan/host_profile.h — what `tandem plan --calibrate` measured on a host, saved for the
// time model (step_time.h): the seconds of each distinct kernel call a layout makes (timed one by
// one on the CPU, calibrate.h), what a call costs beyond its kernel (the framework: autograd,
// allocation; fitted against a real step), how much faster several ranks compute side by side
// than one (they share the host's cores), and a latency + bandwidth fit of the thread ranks'
// collectives and messages. A text file, one fact per line, written atomically:
//   machine	AMD EPYC 9R14 96-Core Processor, 2 threads
//   per_call	1	4.1e-06                 (intra-op threads, seconds)
//   scale	1	1.31                       (intra-op threads, in a step / alone)
//   kernel	2.83e-05	1	gemm float32 [512,128] [384,128] [512,384] F T
#pragma once

#include <map>
#include <string>
#include <vector>

namespace tandem::tools {

/// A link's time for a message of `wire` bytes: latency + wire / bandwidth.
struct LinkFit {
  double latency = 0;    // seconds
  double bandwidth = 0;  // bytes per second
  double seconds(double wire) const { return latency + (bandwidth > 0 ? wire / bandwidth : 0); }
};

/// How a step's kernels cost more than the same kernels timed alone, at one thread count:
/// seconds = scale · alone + per_call, fitted on two real steps (calibrate.h).
struct ComputeFit {
  double scale = 1;  // a step's kernels against the same alone, their inputs hot in the cache
  double per_call =
      0;  // seconds beyond the kernels, per call: the framework (autograd, allocation)
};

struct HostProfile {
  std::string machine;                    // the CPU's model and the intra-op threads
  std::map<std::string, double> kernels;  // seconds alone, by "<threads>\t<signature>"
  std::map<int, ComputeFit> compute;      // by intra-op threads
  // k ranks computing at once get through this many times the work of one alone (k or less: the
  // cores they share, and the caches); measured for k = 1 .. the ranks calibrated for.
  std::map<int, double> throughput = {{1, 1.0}};
  /// The speed of each of k ranks computing at once, against one alone (at most 1).
  double rate(int k) const;
  LinkFit collective;              // all_reduce, all_gather, reduce_scatter, ...: wire
  LinkFit message;                 // send/recv: the message's bytes
  std::vector<std::string> notes;  // what the fits came from (comment lines)

  void save(const std::string& path) const;
  /// ValueError naming the file and line for a file that is not a profile.
  static HostProfile load(const std::string& path);
};

/// "<CPU model>, <n> threads": the machine line of a profile made here now.
std::string this_machine();

}  // namespace tandem::tools
