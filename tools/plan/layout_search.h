// tools/plan/layout_search.h — every layout of a GPT run over N ranks that the trainer accepts
// (dp × tp × pp × cp, sequence parallelism, ZeRO stage, activation checkpointing, pipeline
// schedule and micro-batches), each rehearsed on the meta device (rehearsal.h) for the most
// memory any of its ranks needs, and checked against a device's memory.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "calibrate.h"
#include "rehearsal.h"

namespace tandem::tools {

struct PlannedLayout {
  std::string flags;  // "--tp 2 --pp 2 --chunks 4 --pipeline-schedule 1f1b --zero 1"
  TrainOptions options;
  RankMemory worst;               // the rank that needs the most (its peak is the layout's)
  uint64_t wire_bytes = 0;        // the most any rank puts on the wire in a step
  std::vector<RankTrace> traces;  // each rank's step, when searched with a CallTable
  std::optional<StepTime> time;   // predicted from the traces (step_time.h)
};

/// The layouts of `base`'s model and global batch over `world` ranks; those the trainer refuses
/// (a size that does not divide, too few rows for the micro-batches) are left out and counted in
/// `refused`. In rehearsal order; each is rehearsed once, its ranks' traces kept when `calls`
/// is given.
std::vector<PlannedLayout> search_layouts(const TrainOptions& base, int64_t characters, int world,
                                          int* refused, std::shared_ptr<CallTable> calls = nullptr);

/// The layouts' table, least memory first (with times: those that fit fastest first, then the
/// rest by memory), with whether each fits `memory` bytes (0: no budget); when none fits, the
/// closest and how far each of its terms takes it past the budget.
std::string layouts_table(std::vector<PlannedLayout> layouts, int64_t memory);

}  // namespace tandem::tools
