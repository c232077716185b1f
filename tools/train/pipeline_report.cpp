// tools/train/pipeline_report.cpp — see pipeline_report.h.
#include "pipeline_report.h"

#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule_svg.h>

#include <algorithm>
#include <cmath>

namespace tandem::tools {

namespace {

std::string percents(const std::vector<double>& shares) {
  std::string out;
  for (double s : shares) {
    if (!out.empty()) out += ' ';
    out += std::to_string(std::lround(100 * s));
  }
  return out + " %";
}

}  // namespace

std::vector<ReportSection> pipeline_sections(Setup& s, const std::string& schedule) {
  TD_CHECK_VALUE(s.stages || s.pipe, "pipeline_sections: not a pipeline run");
  std::vector<std::vector<parallel::TimedAction>> measured = s.step_timelines;
  if (s.stages)  // --pp: each rank has its own row
    measured = s.stages->gather_timelines(measured.empty() ? std::vector<parallel::TimedAction>{}
                                                           : measured.front());
  if (measured.empty()) return {};
  for (const auto& rank : measured)
    if (rank.empty()) return {};  // no training step yet
  const parallel::PipelineOrder& order = s.stages ? s.stages->order() : s.pipe->order();
  const parallel::Simulation sim =
      parallel::simulate(order, parallel::measured_costs(order, measured));
  double first = 1e300, last = 0;
  for (const auto& rank : measured)
    for (const parallel::TimedAction& a : rank)
      first = std::min(first, a.start), last = std::max(last, a.end);
  std::vector<double> predicted;
  for (const parallel::SimulatedRank& r : sim.ranks) predicted.push_back(r.idle_share);
  const std::string shape = str(schedule, ", p = ", order.world(), ", m = ", order.micro_batches);
  return {ReportSection{
      .heading = "Pipeline schedule (the last step before this report)",
      .svgs = {parallel::schedule_svg(
                   measured, str(shape, ": measured, ", std::lround((last - first) * 1e3), " ms")),
               parallel::schedule_svg(parallel::timelines(sim),
                                      str(shape, ": simulated from the step's own F, I, W"))},
      .note = str("Idle share per rank (1 - compute time / step): measured ",
                  percents(parallel::idle_shares(measured)), "; simulated ", percents(predicted),
                  ". Blue: forward; green: backward (light: the input's half, I); purple: the "
                  "weights' half (W); gaps: the bubble and waits for neighbours.")}};
}

}  // namespace tandem::tools
