// tools/plan/predict.h — `tandem train --predict`: before the run, each rank's memory as the
// planner predicts it (rehearsal.h, on rank 0); during it, the same terms measured on every
// rank's device (memory_probe.h), gathered to rank 0 after the second step and printed beside
// the prediction.
#pragma once

#include <tandem/parallel/comm/communicator.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rehearsal.h"

namespace tandem::tools {

class PredictedMemory {
 public:
  /// Rehearses the run on rank 0 (call before the model is built); `group`: the run's ranks
  /// (null: one process). The probe starts counting `device`'s bytes here.
  PredictedMemory(const TrainOptions& options, int64_t characters,
                  std::shared_ptr<parallel::Communicator> group, Device device);

  MemoryProbe& probe() { return probe_; }
  /// After a step's update: once the second step has ended, gathers every rank's terms (a
  /// collective) and returns rank 0's table of predicted against measured; empty otherwise.
  std::string after_step();

 private:
  std::shared_ptr<parallel::Communicator> group_;
  Device device_;
  std::vector<RankMemory> predicted_;
  MemoryProbe probe_;
  bool reported_ = false;
};

}  // namespace tandem::tools
