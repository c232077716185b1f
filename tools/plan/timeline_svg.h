// tools/plan/timeline_svg.h — each rank's step as the planner predicted it (step_time.h) over
// the same rank's step as it ran (step_measure.h), on one time axis: the picture of
// `tandem train --predict`'s report.
//
//   rank 0  predicted  ██████████▒▒██████░░░▒▒      █ compute  ▒ communication  ░ idle
//           measured   ███████████▓▓▓█████████▓▓    ▓ blocked (communication or idle: a rank
//   rank 1  predicted  ...                            cannot tell them apart by itself)
#pragma once

#include <string>
#include <vector>

#include "step_measure.h"
#include "step_time.h"

namespace tandem::tools {

/// A self-contained SVG (no script, no external style): per rank a predicted row (its spans) and
/// a measured one (the last measured step: compute between the blocked spans), `caption` above.
/// `measured`: one per rank, in rank order (or empty: the prediction alone).
std::string timeline_svg(const StepTime& predicted, const std::vector<MeasuredStep>& measured,
                         const std::string& caption, int width = 760);

}  // namespace tandem::tools
