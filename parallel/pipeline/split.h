// parallel/pipeline/split.h — model parallelism's first step: cut a Sequential into stages of
// consecutive modules and place each stage on its device. Running the stages in order, with the
// activation moved to the next stage's device in between, trains exactly as the whole model on one
// device does: the copy between devices is differentiable, so gradients flow back across them.
//
//   auto stages = parallel::split(model, {"cpu:0", "cpu:1"});        // balanced by parameters
//   auto stages = parallel::split(model, {"cuda:0", "cuda:1"}, {3, 5}); // 3 modules, then 5
//   Tensor y = parallel::run_stages(stages, x);  // plain model parallelism: one stage at a time
#pragma once

#include <tandem/nn/container.h>
#include <vector>

namespace tandem::parallel {

/// One stage: consecutive modules of the model (the model's own module objects) and where they
/// run.
struct Stage {
  nn::Sequential modules;
  Device device;
  /// This stage's copies of parameters that other stages use too (a tied weight: GPT's token
  /// embedding, read by the first stage and by lm_head on the last), each named by its first
  /// name in the model. split() fills it; tied.h keeps the copies equal.
  std::vector<std::pair<std::string, Tensor>> tied = {};
};

/// `seq` cut into devices.size() stages, stage k's modules moved to devices[k] (`seq` itself now
/// spans the devices, and the stages share its parameters: training them trains it). A tensor
/// that modules on two stages share becomes one copy per device, as Megatron-LM places a tied
/// embedding on its first and last stages; Stage::tied lists them (tied.h keeps them equal).
/// `balance[k]` is the number of modules in stage k: they must sum to seq.size() and none may be 0.
/// Without `balance`, the cut makes the largest stage's parameter count as small as it can be
/// (stages of parameter-free modules such as ReLU weigh nothing). ValueError naming what is wrong
/// otherwise.
std::vector<Stage> split(nn::Sequential& seq, const std::vector<Device>& devices,
                         std::vector<int64_t> balance = {});

/// The module count of each of `stages` stages: `balance` checked (as split() checks it) when
/// given, balance_by_parameters otherwise.
std::vector<int64_t> stage_sizes(nn::Sequential& seq, int64_t stages,
                                 std::vector<int64_t> balance = {});

/// The module counts split() chooses for `seq` over `stages` stages when no balance is given.
std::vector<int64_t> balance_by_parameters(nn::Sequential& seq, int64_t stages);

/// x through every stage in order, moved to each stage's device first (differentiably).
Tensor run_stages(std::vector<Stage>& stages, const Tensor& x);

}  // namespace tandem::parallel
