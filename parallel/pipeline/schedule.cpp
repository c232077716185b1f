// parallel/pipeline/schedule.cpp — the two schedules' action lists.
#include <tandem/core/check.h>
#include <tandem/parallel/pipeline/schedule.h>
#include <algorithm>

namespace tandem::parallel {

std::vector<int64_t> micro_batch_sizes(int64_t n, int64_t m) {
  std::vector<int64_t> sizes(static_cast<size_t>(m), n / m);
  for (int64_t i = 0; i < n % m; ++i) ++sizes[size_t(i)];
  return sizes;
}
namespace {

// 1F1B: the later a stage, the fewer forwards it runs before its first backward: the last stage
// starts backward on micro-batch 0 as soon as its forward is done.
void one_f_one_b(std::vector<PipelineAction>& actions, int64_t stage, int64_t stages, int64_t m) {
  const int64_t warmup = std::min(stages - stage - 1, m);
  for (int64_t i = 0; i < warmup; ++i) actions.push_back({PipelineAction::Forward, i});
  for (int64_t i = warmup; i < m; ++i) {
    actions.push_back({PipelineAction::Forward, i});
    actions.push_back({PipelineAction::Backward, i - warmup});
  }
  for (int64_t i = m - warmup; i < m; ++i) actions.push_back({PipelineAction::Backward, i});
}

}  // namespace

std::vector<PipelineAction> stage_actions(PipelineSchedule schedule, int64_t stage, int64_t stages,
                                          int64_t micro_batches, bool deferred_weight_grads) {
  TD_CHECK_VALUE(stages >= 1 && stage >= 0 && stage < stages && micro_batches >= 1,
                 "stage_actions: stage ", stage, " of ", stages, " with ", micro_batches,
                 " micro-batches");
  const int64_t m = micro_batches;
  std::vector<PipelineAction> actions;
  if (schedule == PipelineSchedule::GPipe) {
    for (int64_t i = 0; i < m; ++i) actions.push_back({PipelineAction::Forward, i});
    for (int64_t i = m - 1; i >= 0; --i) actions.push_back({PipelineAction::Backward, i});
  } else {
    one_f_one_b(actions, stage, stages, m);
  }
  if (deferred_weight_grads) actions.push_back({PipelineAction::Weight, -1});
  return actions;
}

std::string to_string(const PipelineAction& action) {
  if (action.kind == PipelineAction::Weight) return "W";
  std::string out(1, action.kind == PipelineAction::Forward ? 'F' : 'B');
  out += std::to_string(action.micro_batch);
  return out;
}

std::string to_string(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

std::string to_string(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b";
}

PipelineSchedule parse_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::GPipe;
  if (name == "1f1b") return PipelineSchedule::OneFOneB;
  ::tandem::detail::fail<ValueError>("pipeline: unknown schedule \"", name,
                                     "\" (choose gpipe or 1f1b)");
}

}  // namespace tandem::parallel
