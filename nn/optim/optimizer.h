// nn/optim/optimizer.h — the optimizer interface: parameter groups with their own options, step(),
// zero_grad(), a learning rate per group that LR schedules adjust, and a state dict that saves as
// safetensors with PyTorch's keys (state.<i>.exp_avg, ...; param_groups as JSON metadata).
#pragma once

#include <tandem/core/tensor.h>
#include <map>
#include <string>
#include <vector>

namespace tandem::optim {

/// Optimizer state for checkpoints: tensors by key plus the param groups as a JSON string.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;  // "state.<index>.<name>"
  std::string param_groups_json;  // PyTorch's param_groups, "params" = indices
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Applies one update to every parameter that has a gradient (under no-grad).
  virtual void step() = 0;
  /// step(), unless the flag of the parameters' device is nonzero, decided there with no host
  /// read (what a GradScaler needs for a step without a sync, as PyTorch's fused Adam takes
  /// found_inf). `found_inf` holds one float32 [1] flag per device the gradients are on. Returns
  /// false, changing nothing, if this optimizer cannot decide on the device: the caller then
  /// reads the flag and calls step() itself. Adam and AdamW can.
  virtual bool step_unless(const std::vector<Tensor>& found_inf) {
    (void)found_inf;
    return false;
  }
  /// Clears every parameter's .grad (set_to_none, PyTorch's default).
  virtual void zero_grad();

  virtual size_t num_groups() const = 0;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  /// Every parameter, in group order — the index used in state dict keys.
  virtual std::vector<Tensor> parameters() const = 0;

  virtual OptimizerState state_dict() const = 0;
  /// Restores a state_dict(); ValueError naming the key on any mismatch (count, shape, type).
  virtual void load_state_dict(const OptimizerState& state) = 0;
};

/// "state.<index>.<name>" (a state dict key) -> index and name; false for other keys.
bool parse_state_key(const std::string& key, size_t& index, std::string& name);

/// Scales gradients in place so that their global L2 norm is at most max_norm; returns the norm
/// before clipping (as torch.nn.utils.clip_grad_norm_).
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm);
/// The halves of clip_grad_norm_, for gradients spread over ranks (parallel::clip_grad_norm_ sums
/// the squares of what each rank counts): Σ g² over the defined gradients, in float64; and
/// every gradient scaled by max_norm / (norm + 1e-6) when that is below 1.
double grad_square_sum(const std::vector<Tensor>& parameters);
void scale_grads_to_norm(const std::vector<Tensor>& parameters, double norm, double max_norm);

}  // namespace tandem::optim
