// parallel/pipeline/schedule.h — what each stage of a pipeline does, in order: a list of
// "forward micro-batch i" and "backward micro-batch i" actions per stage. The pipeline's workers
// follow these lists; when an action needs a neighbour's result (an activation from the stage
// before, a gradient from the stage after) the worker waits for it, so the clock of the
// schedules below emerges from the data dependencies instead of a global barrier.
//
// GPipe (fill-drain): every stage runs all M forwards, then all M backwards, latest first.
// Micro-batch i reaches stage j at clock i + j; the idle share ("bubble") is (K−1)/(M+K−1) for
// K stages. Stage j holds M micro-batches' activations at its peak.
//
// 1F1B (PipeDream-Flush): stage j runs K−j−1 forwards to fill the pipeline, then alternates one
// forward and one backward (oldest micro-batch first), then drains the last backwards. Same
// bubble, but stage j holds at most K−j micro-batches' activations (K on the first stage).
//
//   K = 2, M = 4     GPipe                      1F1B
//   stage 0:   F0 F1 F2 F3 B3 B2 B1 B0     F0 F1 B0 F2 B1 F3 B2 B3
//   stage 1:   F0 F1 F2 F3 B3 B2 B1 B0     F0 B0 F1 B1 F2 B2 F3 B3
//
// With the weight gradients deferred (autograd/deferred_weight_grads.h), each B computes what the
// stage before needs and the stage's Linear weight gradients come in one W action at the end, over
// all micro-batches at once (zero-bubble's B/W split): "F0 F1 F2 F3 B3 B2 B1 B0 W". The last
// stage's W runs while the first stage is still on its last B, outside the bubble.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::parallel {

enum class PipelineSchedule { GPipe, OneFOneB };

struct PipelineAction {
  enum Kind { Forward, Backward, Weight } kind;
  int64_t micro_batch;  // -1 for Weight: it covers them all
  bool operator==(const PipelineAction&) const = default;
};

/// Stage `stage`'s actions (of `stages` stages) for `micro_batches` micro-batches; with
/// `deferred_weight_grads`, a W action after the last backward.
std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t micro_batches,
                                          bool deferred_weight_grads = false);

/// The sizes of the micro-batches a batch of n samples is cut into, m of them, differing by at
/// most one, larger first (torch.tensor_split's rule: 10 in 4 → 3 3 2 2).
std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m);

/// "F3", "B3" or "W"; "F0 F1 B0 …" for a list (as in the table above).
std::string to_string(const PipelineAction& action);
std::string to_string(const std::vector<PipelineAction>& actions);

/// "gpipe" or "1f1b"; parse_schedule takes these (ValueError naming the choices otherwise).
std::string to_string(PipelineSchedule schedule);
PipelineSchedule parse_schedule(const std::string& name);

}  // namespace tandem::parallel
