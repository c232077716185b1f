// tools/plan/step_time.h — a step's time, predicted: each rank's trace (step_trace.h) played
// against the others' on a simulated clock. A run of kernels lasts what the host's profile says
// (host_profile.h), each call plus the framework's cost per call, slowed while other ranks compute
// too (they share the cores and the caches: HostProfile::rate). A collective waits in its group's
// queue on each rank (a communicator's calls go in order, one group's beside another's) and starts
// when every member has reached it, lasting the link's latency + wire bytes / bandwidth; a message
// arrives that long after its send. A rank that waits on a collective before it ends, or on a
// message not yet there, idles: what its compute overlaps is exactly what the code overlaps (DDP's
// buckets during the backward, the pipeline's sends), and the pipeline's bubble is the idle time
// its schedule leaves.
//
//          compute ███████░░░░██████      ░ waiting for peers (the bubble)
//   rank 0    comm        ▒▒▒▒            ▒ in a collective it waits on
#pragma once

#include <vector>

#include "host_profile.h"
#include "step_trace.h"

namespace tandem::tools {

/// A stretch of a rank's step spent one way (the timelines of the train report).
struct TimeSpan {
  enum class Kind { Compute, Communication, Idle } kind = Kind::Compute;
  double start = 0, end = 0;  // seconds from the step's start
};

struct RankTime {
  double compute = 0;           // seconds in kernels (slowed by the others' sharing the cores)
  double communication = 0;     // seconds waiting on collectives and messages under way
  double idle = 0;              // seconds waiting for peers to reach a collective or to send
  double end = 0;               // when its step ends
  std::vector<TimeSpan> spans;  // the same, in time order (adjacent ones of a kind merged)
};

struct StepTime {
  double step = 0;  // the last rank's end
  std::vector<RankTime> ranks;
  /// The ranks' communication over all their time (compute + communication + idle).
  double communication_share() const;
};

/// The ranks' step, with `seconds[i]` the time of CallTable call i (the framework's per-call
/// cost included). An internal Error if the traces cannot finish (a collective some member never
/// reaches: a rehearsal that disagrees with itself).
StepTime simulate_step(const std::vector<RankTrace>& traces, const std::vector<double>& seconds,
                       const HostProfile& profile);

}  // namespace tandem::tools
