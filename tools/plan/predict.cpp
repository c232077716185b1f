// tools/plan/predict.cpp — the prediction, then the measurement, on one table.
#include "predict.h"

#include "memory_table.h"

namespace tandem::tools {

PredictedMemory::PredictedMemory(const TrainOptions& o, int64_t characters,
                                 std::shared_ptr<parallel::Communicator> group, Device device)
    : group_(std::move(group)), device_(device), probe_(device) {
  if (!group_ || group_->rank() == 0)
    predicted_ = rehearse_gpt(o, characters, group_ ? group_->size() : 1);
}

std::string PredictedMemory::after_step() {
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

}  // namespace tandem::tools
