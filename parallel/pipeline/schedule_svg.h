// parallel/pipeline/schedule_svg.h — a schedule's timeline as a picture: one row per rank, time
// to the right, a box per compute action (forward blue, full backward green, the input's half
// light green, the weights' half purple; the micro-batch's number inside, the stage above when a
// rank holds several), the gaps between them the bubble. The same drawing serves the simulator's
// prediction (simulate(...).ranks[r].timeline) and a measured step (PipelineResult::timeline),
// so the two can be set side by side: docs/parallelism.md and the trainer's HTML report do.
//
//   std::vector<std::vector<TimedAction>> rows;
//   for (const SimulatedRank& r : simulate(order).ranks) rows.push_back(r.timeline);
//   write(schedule_svg(rows, "zb-v, p = 4, m = 8: simulated"));
#pragma once

#include <tandem/parallel/pipeline/schedule_sim.h>
#include <string>
#include <vector>

namespace tandem::parallel {

/// A self-contained SVG (no script, no external style) of `ranks`' timelines, each rank's
/// actions on its row, scaled so that the longest fills the width; `caption` above it. Times may
/// start anywhere (a measured step's clock): the earliest start is the picture's left edge.
std::string schedule_svg(const std::vector<std::vector<TimedAction>>& ranks,
                         const std::string& caption, int width = 760);

/// The simulator's timelines of `sim`, one per rank.
std::vector<std::vector<TimedAction>> timelines(const Simulation& sim);

}  // namespace tandem::parallel
