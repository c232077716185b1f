// tools/plan/step_measure.h — a rank's training steps as they ran, for `tandem train --predict`:
// each step's wall time and the part of it the rank was blocked on communication
// (parallel/comm/blocked_time.h), and the last step's blocked spans, gathered to rank 0 to set
// beside the planner's prediction (step_time.h). The first step is left out: it allocates what
// the later ones reuse, and its threads start.
#pragma once

#include <tandem/core/device.h>
#include <tandem/parallel/comm/blocked_time.h>
#include <tandem/parallel/comm/communicator.h>
#include <cstdint>
#include <vector>

namespace tandem::tools {

struct MeasuredStep {
  int64_t steps = 0;                         // steps measured
  double seconds = 0;                        // their mean wall time
  double blocked = 0;                        // their mean time blocked on communication
  double last = 0;                           // the last one's wall time
  std::vector<parallel::BlockedSpan> spans;  // the last one's blocked spans, from its start
};

class StepMeasure {
 public:
  void begins();  // a training step starts (after zero_grad, before the forward)
  void ends();    // it has ended (after the update)
  const MeasuredStep& mine() const { return mine_; }
  /// Every rank's measurement in rank order on rank 0, empty on the others: a collective over
  /// `group` on tensors of `device` (null group: this process's alone).
  std::vector<MeasuredStep> gather(parallel::Communicator* group, Device device) const;

 private:
  int64_t seen_ = 0;  // steps ended, the first included
  double start_ = 0, blocked_at_start_ = 0, total_ = 0, total_blocked_ = 0;
  MeasuredStep mine_;
};

}  // namespace tandem::tools
