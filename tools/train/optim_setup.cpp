// tools/train/optim_setup.cpp — flags to optimizer and schedule objects.
#include <tandem/nn/optim/adam.h>
#include <tandem/nn/optim/sgd.h>
#include <algorithm>

#include "optim_setup.h"

namespace tandem::tools {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o,
                                                 std::vector<Tensor> params) {
  const double lr = o.lr.value();
  if (o.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        std::move(params),
        optim::SGDOptions{.lr = lr, .momentum = o.momentum, .weight_decay = o.weight_decay});
  const optim::AdamOptions adam{.lr = lr, .weight_decay = o.weight_decay};
  if (o.optimizer == "adamw") return std::make_unique<optim::AdamW>(std::move(params), adam);
  return std::make_unique<optim::Adam>(std::move(params), adam);
}

std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o,
                                                   optim::Optimizer& optimizer,
                                                   int64_t steps_per_epoch) {
  const int64_t total = int64_t(o.epochs) * steps_per_epoch;
  if (o.schedule == "step") return std::make_unique<optim::StepLR>(optimizer, steps_per_epoch, 0.7);
  if (o.schedule == "cosine") return std::make_unique<optim::CosineAnnealingLR>(optimizer, total);
  if (o.schedule == "warmup-cosine") {
    // One epoch of warm-up, but always at least one step of decay (a 1-epoch run).
    const int64_t warmup = std::min(steps_per_epoch, total - 1);
    return std::make_unique<optim::LinearWarmup>(optimizer, warmup, 0.1, total);
  }
  return nullptr;
}

}  // namespace tandem::tools
