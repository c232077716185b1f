// tools/train/optim_setup.h — the optimizer and learning-rate schedule a `tandem train` run asks
// for. Schedules are stepped once per optimizer step, so the lr changes smoothly within an epoch
// (StepLR's "every epoch" is a step size of one epoch's steps).
#pragma once

#include <tandem/nn/optim/lr_scheduler.h>
#include <tandem/nn/optim/optimizer.h>
#include <memory>
#include <vector>

#include "../commands.h"
#include "step.h"

namespace tandem::tools {

/// sgd (with --momentum), adam or adamw over `params`, at the resolved --lr and --weight-decay.
/// With --zero, `ddp` is the run's DDP: the optimizer is then a parallel::ZeroOptimizer over this
/// rank's shard (setup.zero points to it).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& options,
                                                 std::vector<Tensor> params, Setup& setup);

/// The GPT's AdamW (decay on matrices only, optim/param_groups.h), betas (0.9, beta2); with
/// --zero over this rank's shard, as make_optimizer.
std::unique_ptr<optim::Optimizer> make_gpt_optimizer(const TrainOptions& options,
                                                     const nn::StateDict& named, double beta2,
                                                     Setup& setup);

/// The --schedule over epochs × steps_per_epoch steps, or null for "none":
///   step           lr × 0.7 after every epoch (StepLR)
///   cosine         cosine from lr to 0 over the run (CosineAnnealingLR)
///   warmup-cosine  linear from 0.1·lr to lr over the first epoch, then cosine to 0
/// Create it before loading an optimizer checkpoint: it takes the configured lr as its base.
std::unique_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& options,
                                                   optim::Optimizer& optimizer,
                                                   int64_t steps_per_epoch);

}  // namespace tandem::tools
