// nn/optim/grad_scaler.h — loss scaling for float16 training, as torch.amp.GradScaler:
//
//   optim::GradScaler scaler;
//   for (...) {
//     optimizer.zero_grad();
//     Tensor loss;
//     { AutocastGuard autocast(DeviceType::CUDA, kFloat16); loss = loss_fn(model(x), y); }
//     scaler.scale(loss).backward();   // gradients are scale × the true ones
//     scaler.unscale_(optimizer);      // optional: before clipping, so the clip sees true norms
//     optim::clip_grad_norm_(model.parameters(), 1.0);
//     scaler.step(optimizer);          // skipped when a gradient is inf or NaN
//     scaler.update();                 // halves the scale after a skip, doubles it after
//   }                                  // growth_interval good steps in a row
//
// Why: float16's smallest normal is 6e-5, and small gradients flush to zero. Multiplying the loss
// by a large scale (65,536 to start) lifts every gradient by the same factor; dividing them by it
// before the update restores them in float32. A scale too large overflows some gradient to inf:
// that step is skipped and the scale halved. Unlike PyTorch, a skip is not silent: skipped_steps()
// counts them (`tandem train` prints it and writes it to metrics.jsonl).
//
// bfloat16 has float32's exponent range, so it needs no scaling: GradScaler({.enabled = false})
// (what `tandem train --amp bf16` uses) passes losses through and steps the optimizer as is.
//
// No host sync in a step: as PyTorch's, the scale, the found-inf flag and the counters live on
// the device of the loss; unscaling reads the scale there, update() changes it there, and an
// optimizer that can (Adam, AdamW: Optimizer::step_unless) skips on the device's flag. Others
// (SGD) need the flag on the host: step() reads it, one sync. get_scale(), skipped_steps(),
// last_step_skipped() and state_dict() read the device: call them when logging, not every step.
//
// Under DDP every rank must skip the same steps, or their parameters part ways: pass
// `all_reduce`, which sums the found-inf count (float32 [1] on the loss's device) over the
// ranks in place, e.g.
//   .all_reduce = [&](Tensor& t) { parallel::default_group().all_reduce(t)->wait(); }
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <functional>
#include <string>
#include <vector>

namespace tandem::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
  /// Sums a float32 [1] tensor over the ranks in place (DDP); empty: a single process.
  std::function<void(Tensor&)> all_reduce;
};

struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // good steps in a row since the scale last changed
  int64_t skipped_steps = 0;
};
/// {"scale":65536,"growth_tracker":12,"skipped_steps":1}, and back (ValueError naming the field
/// that is missing or malformed).
std::string to_json(const GradScalerState& state);
GradScalerState grad_scaler_state_from_json(const std::string& json);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss × scale (loss itself when disabled). The first call puts the scale on the loss's
  /// device, where it stays.
  Tensor scale(const Tensor& loss);
  /// Divides every gradient of `optimizer`'s parameters by the scale, in place, and notes whether
  /// any is inf or NaN (one fused pass per gradient), on their devices. Once per step;
  /// ValueError if called twice.
  void unscale_(Optimizer& optimizer);
  /// Unscales (if unscale_ was not called) and steps the optimizer unless a gradient was inf or
  /// NaN: decided on the device when the optimizer can, else by reading the flag.
  void step(Optimizer& optimizer);
  /// Halves the scale after a skipped step; doubles it after growth_interval steps in a row
  /// without one. Once per step, after step(). On the device.
  void update();

  /// The scale (read from the device).
  double get_scale() const;
  bool is_enabled() const { return options_.enabled; }
  /// Steps skipped since construction (or since the checkpoint this was loaded from was made);
  /// read from the device.
  int64_t skipped_steps() const;
  /// Whether the last step() skipped (read from the device).
  bool last_step_skipped() const;

  /// What a checkpoint keeps (`tandem train` writes it into optimizer.safetensors' metadata).
  GradScalerState state_dict() const;
  /// Restores state_dict(); ValueError for a scale that is not positive.
  void load_state_dict(const GradScalerState& state);

 private:
  // Moves the state to `device` (the loss's); a no-op once it is there.
  void to_device(Device device);

  GradScalerOptions options_;
  // On one device, the loss's (CPU until the first scale()): scale_ and found_inf_ float32 [1],
  // the counters int64 [1]. found_inf_ holds the last step's flag until the next unscale_.
  Tensor scale_, found_inf_, growth_tracker_, skipped_;
  std::vector<Tensor> found_by_device_;  // the step's flag on each device with gradients
  enum class Stage { Ready, Unscaled, Stepped } stage_ = Stage::Ready;
};

}  // namespace tandem::optim
