// parallel/comm/blocked_time.h — how long this process's threads have been held up by
// communication: blocked in Work::wait, or running a collective in their own thread (shared
// memory runs a small one inline: collective_queue.h). A rank's step is its compute plus this,
// which `tandem train --predict` measures beside what the planner predicts (tools/plan/).
// Waiting on a peer that is late and waiting on the wire are one number here: a rank cannot tell
// them apart without its peers' clocks. Two threads blocked at once both count.
//
//   step  ████████▒▒▒▒████▒▒▒▒▒▒████      ▒ blocked (spans, while recording)
#pragma once

#include <chrono>
#include <vector>

namespace tandem::parallel {

struct BlockedSpan {
  double start = 0, end = 0;  // seconds on the steady clock (blocked_clock())
};

/// Seconds the process has been blocked on communication so far.
double blocked_seconds();
/// The steady clock the spans are on, in seconds.
double blocked_clock();
/// Starts keeping each blocked span (clearing those kept), or stops.
void record_blocked_spans(bool on);
/// The spans kept since recording started, in the order they ended.
std::vector<BlockedSpan> blocked_spans();

namespace detail {
/// Called by Work::wait and the inline collectives: the calling thread was blocked from `from`
/// to `to`.
void note_blocked(std::chrono::steady_clock::time_point from,
                  std::chrono::steady_clock::time_point to);
}  // namespace detail

}  // namespace tandem::parallel
