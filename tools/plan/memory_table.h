// tools/plan/memory_table.h — each rank's memory terms as a table: predicted alone (`tandem plan`),
// or predicted beside measured, term by term (`tandem train --predict`); and their step times.
#pragma once

#include <string>
#include <vector>

#include "rehearsal.h"
#include "step_measure.h"
#include "step_time.h"

namespace tandem::tools {

/// One row per rank: placed, + optimizer, + in the step, = peak (MiB). With `measured` (one per
/// rank, in rank order), each cell is "predicted / measured" and the last column the peak's
/// ratio.
std::string memory_table(const std::vector<RankMemory>& predicted,
                         const std::vector<MemoryTerms>& measured = {});

/// One row per rank: its predicted compute, communication and idle time, and its step's end (ms).
std::string time_table(const StepTime& time);

/// `tandem train --predict`: one row per rank, each cell "predicted / measured" (ms): compute,
/// waiting (predicted: communication + idle; measured: blocked on communication), the step, and
/// the step's ratio. `measured`: one per rank, in rank order.
std::string time_table(const StepTime& time, const std::vector<MeasuredStep>& measured);

}  // namespace tandem::tools
