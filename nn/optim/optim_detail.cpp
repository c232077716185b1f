// nn/optim/optim_detail.cpp — helpers the optimizers share: parameter checks and state dict
// parsing with errors that name the key.
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/optim/optim_detail.h>

namespace tandem::optim::detail {

void check_params(const char* opt, const std::vector<Tensor>& params) {
  TD_CHECK_VALUE(
      !params.empty(), opt,
      ": got no parameters to optimize\n  hint: a module left out of its parent's visit() "
      "has no parameters; print the model to check the tree");
  for (size_t i = 0; i < params.size(); ++i) {
    TD_CHECK_VALUE(params[i].defined() && is_floating(params[i].dtype()) &&
                       params[i].requires_grad() && params[i].is_leaf(),
                   opt, ": parameter ", i,
                   " must be a floating-point leaf tensor that requires grad (got ",
                   describe(params[i]), ")");
  }
}

Tensor contiguous_grad(const char* opt, const Tensor& param, const Tensor& grad) {
  TD_CHECK_SHAPE(grad.shape() == param.shape() && grad.device() == param.device() &&
                     grad.dtype() == param.dtype(),
                 opt, ": gradient ", describe(grad), " does not match its parameter ",
                 describe(param));
  TD_CHECK_VALUE(param.is_contiguous(), opt, ": parameters must be contiguous (got strides ",
                 param.strides(), ")");
  return tandem::detail::contiguous(grad);
}

nlohmann::json parse_groups(const char* opt, const std::string& json, size_t groups) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  TD_CHECK_VALUE(!j.is_discarded() && j.is_array(), opt,
                 ": optimizer state has malformed param_groups JSON");
  TD_CHECK_VALUE(j.size() == groups, opt, ": optimizer state has ", j.size(),
                 " param groups, this optimizer has ", groups);
  return j;
}

void check_group_size(const char* opt, const nlohmann::json& group, size_t k, size_t expected) {
  TD_CHECK_VALUE(group.contains("params") && group["params"].size() == expected, opt,
                 ": param group ", k, " of the optimizer state holds ",
                 group.contains("params") ? group["params"].size() : 0,
                 " parameters, this optimizer's holds ", expected);
}

Tensor state_tensor(const char* opt, const OptimizerState& state, size_t i, const std::string& name,
                    const Tensor& param, bool required, bool scalar) {
  const std::string key = str("state.", i, ".", name);
  for (const auto& [k, t] : state.tensors) {
    if (k != key) continue;
    TD_CHECK_VALUE(scalar ? t.numel() == 1 : t.shape() == param.shape(), opt,
                   ": optimizer state \"", key, "\" has shape ", t.shape(), " but parameter ", i,
                   " has shape ", param.shape());
    return tandem::detail::convert(t, param.device(), scalar ? t.dtype() : param.dtype());
  }
  TD_CHECK_VALUE(!required, opt, ": optimizer state has no \"", key, "\"");
  return Tensor();
}

}  // namespace tandem::optim::detail
