// nn/optim/sgd.cpp — SGD: one fused kernel per parameter per step (core/kernels/cpu/optim.cpp).
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/optim/optim_detail.h>
#include <tandem/nn/optim/sgd.h>
#include <nlohmann/json.hpp>

namespace tandem::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<Group>{{std::move(params), options}}) {}

SGD::SGD(std::vector<Group> groups) : groups_(std::move(groups)) {
  for (const Group& g : groups_) {
    const SGDOptions& o = g.options;
    TD_CHECK_VALUE(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0,
                   "SGD: lr, momentum and weight_decay must be >= 0");
    TD_CHECK_VALUE(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                   "SGD: Nesterov momentum requires momentum > 0 and zero dampening");
  }
  detail::check_params("SGD", parameters());
  momentum_.resize(parameters().size());
}

std::vector<Tensor> SGD::parameters() const { return detail::flatten_groups(groups_); }

void SGD::step() {
  NoGradGuard no_grad;
  size_t i = 0;
  for (Group& g : groups_) {
    for (Tensor& p : g.params) {
      Tensor& buf = momentum_[i++];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      const bool first = !buf.defined();
      // A captured first step would make every replay a first step (buffer = gradient).
      TD_CHECK_VALUE(!(first && g.options.momentum != 0 && p.device().is_cuda() &&
                       cuda::is_capturing(p.device().index())),
                     "SGD: the first step with momentum is being captured into a CUDA graph, and "
                     "every replay would repeat it (the buffer starts as the gradient)\n  hint: "
                     "take a step before capturing (warm up)");
      if (g.options.momentum != 0 && first) buf = empty_like(p);
      const SgdParams sp{g.options.lr,           g.options.momentum, g.options.dampening,
                         g.options.weight_decay, g.options.nesterov, first};
      Tensor dp = p;
      kernels(p.device()).sgd_step(dp, detail::contiguous_grad("SGD", p, grad), buf, sp);
      tandem::detail::bump_version(p);
    }
  }
}

OptimizerState SGD::state_dict() const {
  OptimizerState s;
  nlohmann::json groups = nlohmann::json::array();
  size_t i = 0;
  for (const Group& g : groups_) {
    nlohmann::json params = nlohmann::json::array();
    for (size_t k = 0; k < g.params.size(); ++k, ++i) {
      params.push_back(i);
      if (momentum_[i].defined())
        s.tensors.emplace_back(str("state.", i, ".momentum_buffer"), momentum_[i]);
    }
    const SGDOptions& o = g.options;
    groups.push_back({{"lr", o.lr},
                      {"momentum", o.momentum},
                      {"dampening", o.dampening},
                      {"weight_decay", o.weight_decay},
                      {"nesterov", o.nesterov},
                      {"maximize", false},
                      {"foreach", nullptr},
                      {"differentiable", false},
                      {"params", params}});
  }
  s.param_groups_json = groups.dump();
  return s;
}

void SGD::load_state_dict(const OptimizerState& state) {
  const nlohmann::json groups =
      detail::parse_groups("SGD", state.param_groups_json, groups_.size());
  for (size_t k = 0; k < groups_.size(); ++k) {
    const auto& j = groups[k];
    detail::check_group_size("SGD", j, k, groups_[k].params.size());
    SGDOptions& o = groups_[k].options;
    o.lr = j.at("lr");
    o.momentum = j.at("momentum");
    o.dampening = j.at("dampening");
    o.weight_decay = j.at("weight_decay");
    o.nesterov = j.at("nesterov");
  }
  const std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < params.size(); ++i)
    momentum_[i] = detail::state_tensor("SGD", state, i, "momentum_buffer", params[i], false);
}

}  // namespace tandem::optim
