// nn/optim/sgd.h — stochastic gradient descent with momentum, dampening, Nesterov and weight
// decay, with torch.optim.SGD's exact update rule and state dict layout (momentum_buffer).
#pragma once

#include <tandem/nn/optim/optimizer.h>

namespace tandem::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  struct Group {
    std::vector<Tensor> params;
    SGDOptions options;
  };
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<Group> groups);

  void step() override;
  size_t num_groups() const override { return groups_.size(); }
  double lr(size_t group) const override { return groups_.at(group).options.lr; }
  void set_lr(size_t group, double lr) override { groups_.at(group).options.lr = lr; }
  std::vector<Tensor> parameters() const override;
  std::vector<Group>& param_groups() { return groups_; }
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

 private:
  std::vector<Group> groups_;
  std::vector<Tensor> momentum_;  // per parameter index; undefined before its first step
};

}  // namespace tandem::optim
