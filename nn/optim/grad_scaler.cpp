// nn/optim/grad_scaler.cpp — torch.amp.GradScaler's algorithm: scale the loss, unscale and check
// the gradients in one fused pass per tensor (Kernels::unscale_grad), skip the step on inf/NaN,
// and grow or back off the scale (Kernels::amp_update_scale) — all on the device, so that a step
// waits for the host nowhere (with an optimizer that skips on the device's flag).
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(std::move(options)) {
  TD_CHECK_VALUE(options_.init_scale > 0 && options_.growth_factor > 1 &&
                     options_.backoff_factor > 0 && options_.backoff_factor < 1 &&
                     options_.growth_interval >= 1,
                 "GradScaler: expected init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 "
                 "and growth_interval >= 1, but got ",
                 options_.init_scale, ", ", options_.growth_factor, ", ", options_.backoff_factor,
                 ", ", options_.growth_interval);
  scale_ = full({1}, options_.init_scale, {.dtype = kFloat32});
  found_inf_ = zeros({1}, {.dtype = kFloat32});
  growth_tracker_ = zeros({1}, {.dtype = kInt64});
  skipped_ = zeros({1}, {.dtype = kInt64});
}

void GradScaler::to_device(Device device) {
  if (scale_.device() == device) return;
  for (Tensor* t : {&scale_, &found_inf_, &growth_tracker_, &skipped_}) *t = t->to(device);
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  to_device(loss.device());
  // A [] view, so the product keeps the loss's shape; in the loss's dtype, as binary ops want.
  return loss * scale_.reshape({}).to(loss.dtype());
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  TD_CHECK_VALUE(stage_ == Stage::Ready,
                 "GradScaler: unscale_() was already called since the last update(); call it "
                 "once per step, before step()");
  NoGradGuard no_grad;
  // One flag (and one copy of the scale) per device the gradients live on: a pipeline spreads
  // them over several.
  found_by_device_.clear();
  std::vector<Tensor> scales;
  for (const Tensor& p : optimizer.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    size_t k = 0;
    while (k < found_by_device_.size() && found_by_device_[k].device() != g.device()) ++k;
    if (k == found_by_device_.size()) {
      found_by_device_.push_back(zeros({1}, {.dtype = kFloat32, .device = g.device()}));
      scales.push_back(scale_.to(g.device()));
    }
    kernels(g.device()).unscale_grad(g, scales[k], found_by_device_[k]);
  }
  // The step's flag: the sum over the devices, on the scale's, then over the ranks; and back on
  // every device, for an optimizer that skips there. Device-to-device copies: no host wait.
  Tensor total;
  for (const Tensor& f : found_by_device_) {
    const Tensor here = f.to(scale_.device());
    total = total.defined() ? total + here : here;
  }
  if (!total.defined()) total = zeros({1}, {.dtype = kFloat32, .device = scale_.device()});
  if (options_.all_reduce) options_.all_reduce(total);
  for (Tensor& f : found_by_device_)
    if (!f.is_same(total)) f.copy_(total);
  found_inf_ = total;
  stage_ = Stage::Unscaled;
}

void GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return;
  }
  TD_CHECK_VALUE(stage_ != Stage::Stepped,
                 "GradScaler: step() was already called since the last update()");
  if (stage_ == Stage::Ready) unscale_(optimizer);
  // An optimizer that cannot skip on the device's flag gets it read here: one host sync.
  if (!optimizer.step_unless(found_by_device_) && found_inf_.item() == 0) optimizer.step();
  stage_ = Stage::Stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  TD_CHECK_VALUE(stage_ == Stage::Stepped,
                 "GradScaler: update() needs a step() first (unscale_, step, update per step)");
  kernels(scale_.device())
      .amp_update_scale(scale_, growth_tracker_, skipped_, found_inf_,
                        {.growth_factor = options_.growth_factor,
                         .backoff_factor = options_.backoff_factor,
                         .growth_interval = options_.growth_interval});
  stage_ = Stage::Ready;
}

double GradScaler::get_scale() const { return scale_.item(); }
int64_t GradScaler::skipped_steps() const { return int64_t(skipped_.item()); }
bool GradScaler::last_step_skipped() const { return found_inf_.item() > 0; }

GradScalerState GradScaler::state_dict() const {
  return {.scale = get_scale(),
          .growth_tracker = int64_t(growth_tracker_.item()),
          .skipped_steps = skipped_steps()};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  TD_CHECK_VALUE(state.scale > 0 && std::isfinite(state.scale), "GradScaler: the saved scale is ",
                 state.scale, "; expected a positive number");
  const Device d = scale_.device();
  scale_ = full({1}, state.scale, {.dtype = kFloat32, .device = d});
  growth_tracker_ = full({1}, double(state.growth_tracker), {.dtype = kInt64, .device = d});
  skipped_ = full({1}, double(state.skipped_steps), {.dtype = kInt64, .device = d});
  found_inf_ = zeros({1}, {.dtype = kFloat32, .device = d});
  stage_ = Stage::Ready;
}

std::string to_json(const GradScalerState& s) {
  return nlohmann::json{
      {"scale", s.scale}, {"growth_tracker", s.growth_tracker}, {"skipped_steps", s.skipped_steps}}
      .dump();
}

GradScalerState grad_scaler_state_from_json(const std::string& text) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    return {.scale = j.at("scale").get<double>(),
            .growth_tracker = j.at("growth_tracker").get<int64_t>(),
            .skipped_steps = j.at("skipped_steps").get<int64_t>()};
  } catch (const nlohmann::json::exception& e) {
    ::tandem::detail::fail<ValueError>("GradScaler: malformed saved state '", text, "' (", e.what(),
                                       ")");
  }
  return {};
}

}  // namespace tandem::optim
