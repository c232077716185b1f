// nn/optim/grad_scaler.cpp — torch.amp.GradScaler's algorithm: scale the loss, unscale and check
// the gradients in one fused pass per tensor (Kernels::unscale_grad), skip the step on inf/NaN,
// and grow or back off the scale.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

namespace tandem::optim {

GradScaler::GradScaler(GradScalerOptions options)
    : options_(std::move(options)), scale_(options_.init_scale) {
  TD_CHECK_VALUE(options_.init_scale > 0 && options_.growth_factor > 1 &&
                     options_.backoff_factor > 0 && options_.backoff_factor < 1 &&
                     options_.growth_interval >= 1,
                 "GradScaler: expected init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 "
                 "and growth_interval >= 1, but got ",
                 options_.init_scale, ", ", options_.growth_factor, ", ", options_.backoff_factor,
                 ", ", options_.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  TD_CHECK_VALUE(stage_ == Stage::Ready,
                 "GradScaler: unscale_() was already called since the last update(); call it "
                 "once per step, before step()");
  NoGradGuard no_grad;
  // One found-inf flag per device the gradients live on (a pipeline spreads them), summed on
  // the host at the end: the flags are read once, not once per tensor.
  std::vector<std::pair<Device, Tensor>> found;
  const double inv_scale = 1.0 / scale_;
  for (const Tensor& p : optimizer.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous();
      p.set_grad(g);
    }
    auto it = std::find_if(found.begin(), found.end(),
                           [&](const auto& f) { return f.first == g.device(); });
    if (it == found.end())
      it = found.insert(found.end(), {g.device(), zeros({1}, {.device = g.device()})});
    kernels(g.device()).unscale_grad(g, inv_scale, it->second);
  }
  Tensor total = zeros({1});
  for (auto& [device, flag] : found) total.add_(flag.to(Device::cpu()));
  if (options_.all_reduce) options_.all_reduce(total);
  found_inf_ = total.item() > 0;
  stage_ = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  TD_CHECK_VALUE(stage_ != Stage::Stepped,
                 "GradScaler: step() was already called since the last update()");
  if (stage_ == Stage::Ready) unscale_(optimizer);
  last_skipped_ = found_inf_;
  if (found_inf_) {
    ++skipped_;
  } else {
    optimizer.step();
  }
  stage_ = Stage::Stepped;
  return !last_skipped_;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  TD_CHECK_VALUE(stage_ == Stage::Stepped,
                 "GradScaler: update() needs a step() first (unscale_, step, update per step)");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  stage_ = Stage::Ready;
  found_inf_ = false;
}

GradScalerState GradScaler::state_dict() const {
  return {.scale = scale_, .growth_tracker = growth_tracker_, .skipped_steps = skipped_};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  TD_CHECK_VALUE(state.scale > 0 && std::isfinite(state.scale), "GradScaler: the saved scale is ",
                 state.scale, "; expected a positive number");
  scale_ = state.scale;
  growth_tracker_ = state.growth_tracker;
  skipped_ = state.skipped_steps;
  stage_ = Stage::Ready;
  found_inf_ = false;
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
