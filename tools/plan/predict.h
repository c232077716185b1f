// tools/plan/predict.h — `tandem train --predict`: before the run, each rank's memory as the
// planner predicts it (rehearsal.h, on rank 0), and with --profile its step time (step_time.h,
// from a host profile of `tandem plan --calibrate`); during it, the same measured on every rank:
// the memory terms on its device (memory_probe.h), gathered to rank 0 after the second step, and
// each step's time and time blocked on communication (step_measure.h), gathered at each
// evaluation, printed at the last beside the prediction and drawn in the report.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../train/report.h"
#include "rehearsal.h"
#include "step_measure.h"
#include "step_time.h"

namespace tandem::tools {

class Prediction {
 public:
  /// Rehearses the run on rank 0 (call before the model is built); `group`: the run's ranks
  /// (null: one process). The probe starts counting `device`'s bytes here. With
  /// options.predict_profile, the step time too: ValueError naming the file for a profile that
  /// lacks the run's kernels or thread count.
  Prediction(const TrainOptions& options, int64_t characters,
             std::shared_ptr<parallel::Communicator> group, Device device);

  MemoryProbe& probe() { return probe_; }
  /// Rank 0's predicted step per rank, to print before the run; empty without a profile.
  std::string time_before() const;

  void step_begins();
  /// After a step's update: once the second step has ended, gathers every rank's memory terms (a
  /// collective) and returns rank 0's table of predicted against measured; empty otherwise.
  std::string after_step();

  /// At an evaluation, with a profile and a step measured (every rank, the same iterations: a
  /// collective): every rank's steps so far against the prediction. Rank 0 gets the report's
  /// section and `table` its text; the others nothing.
  std::optional<ReportSection> time_section(std::string* table);

 private:
  std::shared_ptr<parallel::Communicator> group_;
  Device device_;
  std::vector<RankMemory> predicted_;
  std::optional<StepTime> time_;  // rank 0, with a profile
  std::string machine_;           // the profile's
  bool timed_ = false;            // every rank: a profile was given
  MemoryProbe probe_;
  StepMeasure steps_;
  bool reported_ = false;
};

}  // namespace tandem::tools
