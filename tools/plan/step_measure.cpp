// tools/plan/step_measure.cpp — see step_measure.h.
#include "step_measure.h"

#include <tandem/core/tensor.h>
#include <algorithm>

namespace tandem::tools {

void StepMeasure::begins() {
  parallel::record_blocked_spans(true);
  blocked_at_start_ = parallel::blocked_seconds();
  start_ = parallel::blocked_clock();
}

void StepMeasure::ends() {
  const double end = parallel::blocked_clock();
  const double blocked = parallel::blocked_seconds() - blocked_at_start_;
  std::vector<parallel::BlockedSpan> spans = parallel::blocked_spans();
  parallel::record_blocked_spans(false);
  if (++seen_ == 1) return;  // the first step: warming up
  total_ += end - start_;
  total_blocked_ += blocked;
  mine_.steps = seen_ - 1;
  mine_.seconds = total_ / double(mine_.steps);
  mine_.blocked = total_blocked_ / double(mine_.steps);
  mine_.last = end - start_;
  mine_.spans.clear();
  for (const parallel::BlockedSpan& s : spans)  // a span begun before the step: its part in it
    if (s.end > start_)
      mine_.spans.push_back({std::max(s.start, start_) - start_, std::min(s.end, end) - start_});
}

std::vector<MeasuredStep> StepMeasure::gather(parallel::Communicator* group, Device device) const {
  // Laid out as doubles: steps, mean, blocked, last, then the spans' starts and ends, padded to
  // the most spans a rank has (their count gathered first).
  const auto pack = [&](size_t spans) {
    std::vector<double> v = {double(mine_.steps), mine_.seconds, mine_.blocked, mine_.last,
                             double(mine_.spans.size())};
    for (size_t i = 0; i < spans; ++i)
      for (double x : {i < mine_.spans.size() ? mine_.spans[i].start : 0.0,
                       i < mine_.spans.size() ? mine_.spans[i].end : 0.0})
        v.push_back(x);
    return v;
  };
  const auto unpack = [](const std::vector<double>& v) {
    MeasuredStep m{.steps = int64_t(v[0]), .seconds = v[1], .blocked = v[2], .last = v[3]};
    for (size_t i = 0; i < size_t(v[4]); ++i) m.spans.push_back({v[5 + 2 * i], v[6 + 2 * i]});
    return m;
  };
  if (!group) return {unpack(pack(mine_.spans.size()))};
  const auto all_gather = [&](const std::vector<double>& mine) {
    const int64_t n = int64_t(mine.size());
    std::vector<Tensor> all;
    for (int r = 0; r < group->size(); ++r)
      all.push_back(empty({n}, {.dtype = kFloat64, .device = device}));
    group->all_gather(all, from_vector(mine, {n}, device))->wait();
    std::vector<std::vector<double>> out;
    for (const Tensor& t : all) out.push_back(t.to(Device::cpu()).to_vector<double>());
    return out;
  };
  size_t most = 0;
  for (const std::vector<double>& c : all_gather({double(mine_.spans.size())}))
    most = std::max(most, size_t(c[0]));
  const std::vector<std::vector<double>> all = all_gather(pack(most));
  if (group->rank() != 0) return {};
  std::vector<MeasuredStep> out;
  for (const std::vector<double>& v : all) out.push_back(unpack(v));
  return out;
}

}  // namespace tandem::tools
