// tools/train/pipeline_report.h — the report's picture of a --pp run's schedule: the last
// training step's timeline as it ran (every rank's actions, gathered over the pipeline group),
// beside the simulator's prediction for the same schedule from that step's own action costs
// (each stage's median F, I, W: parallel/pipeline/schedule_sim.h), and each rank's idle share,
// measured and predicted. A rank that idles well above its prediction waited on something the
// schedule does not explain (a slow neighbour, the host, communication).
#pragma once

#include <string>
#include <vector>

#include "report.h"
#include "setup.h"

namespace tandem::tools {

/// The section for `s`'s last step (Setup::step_timelines; before the first step, none: no
/// section). --pp: collective over the pipeline group, every rank hands its own row. `schedule`:
/// its name, for the captions.
std::vector<ReportSection> pipeline_sections(Setup& s, const std::string& schedule);

}  // namespace tandem::tools
