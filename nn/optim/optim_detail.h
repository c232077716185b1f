// nn/optim/optim_detail.h — helpers the optimizers share (parameter checks, state dict parsing).
// Internal: nlohmann/json is included only by the .cpp files that need it.
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::optim::detail {

/// Every parameter of every group, in group order (the index used in state dict keys).
template <typename Group>
std::vector<Tensor> flatten_groups(const std::vector<Group>& groups) {
  std::vector<Tensor> out;
  for (const Group& g : groups) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

/// ValueError unless every parameter is a defined floating leaf that requires grad.
void check_params(const char* opt, const std::vector<Tensor>& params);
/// The gradient, checked against its parameter and made contiguous for the fused kernels.
Tensor contiguous_grad(const char* opt, const Tensor& param, const Tensor& grad);
/// Parses param_groups JSON; ValueError when it is malformed or has the wrong number of groups.
nlohmann::json parse_groups(const char* opt, const std::string& json, size_t groups);
/// ValueError when group k of a state dict holds a different number of parameters.
void check_group_size(const char* opt, const nlohmann::json& group, size_t k, size_t expected);
/// "state.<i>.<name>" from a state dict, copied to the parameter's device and dtype and checked
/// against its shape (scalar state such as Adam's step excepted); undefined if absent and
/// !required.
Tensor state_tensor(const char* opt, const OptimizerState& state, size_t i, const std::string& name,
                    const Tensor& param, bool required, bool scalar = false);

}  // namespace tandem::optim::detail
