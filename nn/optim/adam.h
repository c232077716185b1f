// nn/optim/adam.h — Adam and AdamW (decoupled weight decay), with torch.optim's exact update and
// state dict layout: per parameter a float32 scalar `step`, `exp_avg` and `exp_avg_sq`.
#pragma once

#include <tandem/nn/optim/optimizer.h>

namespace tandem::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // AdamW's default is 1e-2
  /// PyTorch's capturable: the step counts live on the parameters' devices from the first step,
  /// so that a CUDA graph (core/cuda/graph.h) can capture a step whose replays each advance them.
  bool capturable = false;
};

class Adam : public Optimizer {
 public:
  struct Group {
    std::vector<Tensor> params;
    AdamOptions options;
  };
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<Group> groups, bool decoupled_weight_decay = false);

  void step() override;
  /// Keeps each parameter's step count on its device from the first call on (PyTorch's
  /// capturable Adam), so that a skipped step is decided there; step() then counts there too.
  bool step_unless(const std::vector<Tensor>& found_inf) override;
  size_t num_groups() const override { return groups_.size(); }
  double lr(size_t group) const override { return groups_.at(group).options.lr; }
  void set_lr(size_t group, double lr) override { groups_.at(group).options.lr = lr; }
  std::vector<Tensor> parameters() const override;
  std::vector<Group>& param_groups() { return groups_; }
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  struct State {
    int64_t step = 0;
    Tensor exp_avg, exp_avg_sq;
    Tensor device_step;  // float32 [] on the parameter's device, once step_unless was used
  };
  // The update over every parameter with a gradient; with `on_device`, the counts and the flag
  // are read on the device (found_inf empty: never skip).
  void update(bool on_device, const std::vector<Tensor>& found_inf);
  std::vector<Group> groups_;
  std::vector<State> state_;  // per parameter index
  bool decoupled_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter): p ← p·(1 − lr·wd) before the update.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 1e-2})
      : Adam(std::vector<Group>{{std::move(params), options}}, true) {}
  explicit AdamW(std::vector<Group> groups) : Adam(std::move(groups), true) {}
};

}  // namespace tandem::optim
