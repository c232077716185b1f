// tools/plan/predict.cpp — the prediction, then the measurement, on one table.
#include "predict.h"

#include <cstdio>

#include "calibrate.h"
#include "memory_table.h"
#include "timeline_svg.h"

namespace tandem::tools {

Prediction::Prediction(const TrainOptions& o, int64_t characters,
                       std::shared_ptr<parallel::Communicator> group, Device device)
    : group_(std::move(group)),
      device_(device),
      timed_(!o.predict_profile.empty()),
      probe_(device) {
  if (group_ && group_->rank() != 0) return;
  const int world = group_ ? group_->size() : 1;
  if (!timed_) {
    predicted_ = rehearse_gpt(o, characters, world);
    return;
  }
  TimeModel model;
  model.profile = HostProfile::load(o.predict_profile);
  machine_ = model.profile.machine;
  predicted_ = rehearse_gpt(o, characters, world, model.calls);
  std::vector<RankTrace> traces;
  for (const RankMemory& r : predicted_) traces.push_back(r.trace);
  try {
    time_ = model.predict(traces);
  } catch (const ValueError& e) {  // a profile of other shapes or thread counts: say which file
    throw ValueError(str("train: --profile ", o.predict_profile, ": ", e.what(),
                         "\n  hint: calibrate with this run's flags: tandem plan <the same "
                         "flags> --nproc ",
                         world, " --calibrate ", o.predict_profile));
  }
}

std::string Prediction::time_before() const {
  if (!time_) return "";
  return str("step time per rank, predicted from the profile of ", machine_, " (ms):\n",
             time_table(*time_));
}

void Prediction::step_begins() {
  probe_.step_begins();
  if (timed_) steps_.begins();
}

std::string Prediction::after_step() {
  if (timed_) steps_.ends();
  probe_.step_ends();
  if (reported_ || !probe_.done()) return "";
  reported_ = true;
  const MemoryTerms& t = probe_.terms();
  const Tensor mine = from_vector(std::vector<int64_t>{t.placed, t.between, t.peak}, {3}, device_);
  std::vector<Tensor> all;
  if (group_) {
    for (int r = 0; r < group_->size(); ++r)
      all.push_back(empty({3}, {.dtype = kInt64, .device = device_}));
    group_->all_gather(all, mine)->wait();
  } else {
    all.push_back(mine);
  }
  if (group_ && group_->rank() != 0) return "";
  std::vector<MemoryTerms> measured;
  for (const Tensor& a : all) {
    const std::vector<int64_t> v = a.to(Device::cpu()).to_vector<int64_t>();
    measured.push_back({.placed = v[0], .between = v[1], .peak = v[2]});
  }
  return memory_table(predicted_, measured);
}

std::optional<ReportSection> Prediction::time_section(std::string* table) {
  if (!timed_ || steps_.mine().steps == 0) return std::nullopt;
  const std::vector<MeasuredStep> measured = steps_.gather(group_.get(), device_);
  if (!time_) return std::nullopt;  // not rank 0
  if (table)
    *table =
        str("step time per rank, predicted / measured (ms, the mean of ", measured.front().steps,
            " steps after the first):\n", time_table(*time_, measured));
  double measured_mean = 0;  // the slowest rank's
  for (const MeasuredStep& m : measured) measured_mean = std::max(measured_mean, m.seconds);
  const auto ms = [](double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
    return std::string(buf);
  };
  return ReportSection{
      .heading = "Step time, predicted and measured",
      .svgs = {timeline_svg(*time_, measured,
                            str("each rank's step: predicted (", ms(time_->step),
                                ") over measured (the last step before this report)"))},
      .note = str("Predicted by tandem plan's time model from the profile of ", machine_,
                  " (the run rehearsed on the meta device, its ranks' kernels and collectives "
                  "played on one clock); measured: the mean step ",
                  ms(measured_mean), " over ", measured.front().steps,
                  " steps after the first. A measured rank's time blocked on communication is "
                  "its collectives under way and its waits for peers together: one rank cannot "
                  "tell them apart.")};
}

}  // namespace tandem::tools
