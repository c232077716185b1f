// tools/train/optim_setup.cpp — flags to optimizer and schedule objects.
#include <tandem/nn/optim/adam.h>
#include <tandem/nn/optim/param_groups.h>
#include <tandem/nn/optim/sgd.h>
#include <algorithm>

#include "optim_setup.h"

namespace tandem::tools {

namespace {

// Opt over `params` with `options`, or its ZeRO form over this rank's shard.
template <typename Opt, typename Options>
std::unique_ptr<optim::Optimizer> build(std::vector<Tensor> params, Options options, int stage,
                                        Setup& s) {
  if (!s.ddp || stage == 0) return std::make_unique<Opt>(std::move(params), options);
  auto zero = parallel::zero_optimizer<Opt>(*s.ddp, params, options);
  s.zero = zero.get();
  return zero;
}

}  // namespace

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, std::vector<Tensor> params,
                                                 Setup& s) {
  const double lr = o.lr.value();
  if (o.optimizer == "sgd")
    return build<optim::SGD>(
        std::move(params),
        optim::SGDOptions{.lr = lr, .momentum = o.momentum, .weight_decay = o.weight_decay}, o.zero,
        s);
  const optim::AdamOptions adam{
      .lr = lr, .weight_decay = o.weight_decay, .capturable = o.cuda_graphs};
  if (o.optimizer == "adamw") return build<optim::AdamW>(std::move(params), adam, o.zero, s);
  return build<optim::Adam>(std::move(params), adam, o.zero, s);
}

std::unique_ptr<optim::Optimizer> make_gpt_optimizer(const TrainOptions& o,
                                                     const nn::StateDict& named, double beta2,
                                                     Setup& s) {
  // A pipeline stage keeps both groups, empty or not: its checkpoint lines up with one device's.
  auto groups = optim::adamw_groups(
      named, {.lr = *o.lr, .beta1 = 0.9, .beta2 = beta2, .weight_decay = o.weight_decay},
      s.stages != nullptr);
  if (!s.ddp || o.zero == 0) return std::make_unique<optim::AdamW>(std::move(groups));
  auto zero = parallel::zero_optimizer<optim::AdamW>(*s.ddp, std::move(groups));
  s.zero = zero.get();
  return zero;
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
