// tools/plan/calibrate.h — `tandem plan --calibrate`: this host's numbers for the time model.
// Kernels: each distinct call a rehearsal records is run for real on the CPU, alone, at the
// intra-op threads a rank of the layout gets (tandem launch shares the cores among the local
// ranks), and its time kept by signature. The rest (host_profile.h) is measured once: real
// steps of the model on one CPU device (its batch, a quarter of it) against their kernels' sums
// give how much slower kernels run in a step and the framework's cost per call; the same kernels
// on 1, 2, .. ranks' threads at once give how far the cores share; two
// processes over shared memory (the trainer's CPU backend) give the collectives' and the
// messages' latency and bandwidth.
#pragma once

#include <vector>

#include "../commands.h"
#include "host_profile.h"
#include "rehearsal.h"
#include "step_time.h"

namespace tandem::tools {

/// The intra-op threads `tandem launch` gives each of `world` ranks on this host.
int rank_threads(int world);

/// Seconds per call of `calls` (the framework's per-call cost included) with `threads` intra-op
/// threads; ValueError naming the first call the profile lacks, and the remedy.
std::vector<double> call_seconds(const CallTable& calls, int threads, const HostProfile& profile);

/// Times on this host, with `threads` intra-op threads, each call of `calls` the profile lacks.
void time_calls(const CallTable& calls, int threads, HostProfile& profile);

/// Measures into `profile`, for `ranks` ranks launched on this host (rank_threads each), how a
/// real step's kernels cost more than alone and the framework's cost per call (real steps of
/// `options`' model on one CPU device, of its batch and of a quarter of it, against their
/// kernels alone: two equations for the two), and the throughput of 1 ..
/// `ranks` ranks computing at once. Before measure_links: a process that has forked computes on
/// fewer threads.
void calibrate_compute(const TrainOptions& options, int64_t characters, int ranks,
                       HostProfile& profile);

/// Measures the links: two processes over shared memory. It forks: call it after the kernels are
/// timed, with no thread of the caller's own running.
void measure_links(HostProfile& profile);

/// A profile and the calls of the rehearsals it prices.
struct TimeModel {
  HostProfile profile;
  std::shared_ptr<CallTable> calls = std::make_shared<CallTable>();
  /// The step of ranks with these traces (rehearsed with `calls`), `tandem launch`ed here.
  StepTime predict(const std::vector<RankTrace>& traces) const;
};

}  // namespace tandem::tools
