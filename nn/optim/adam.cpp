// nn/optim/adam.cpp — Adam/AdamW: fused multi-tensor updates, with the step counts on the host, or
// on the devices once a GradScaler asks for steps it can skip without reading its flag.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/nn/optim/adam.h>
#include <tandem/nn/optim/optim_detail.h>
#include <algorithm>

namespace tandem::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<Group>{{std::move(params), options}}) {}

Adam::Adam(std::vector<Group> groups, bool decoupled)
    : groups_(std::move(groups)), decoupled_(decoupled) {
  for (const Group& g : groups_) {
    const AdamOptions& o = g.options;
    TD_CHECK_VALUE(o.lr >= 0 && o.eps >= 0 && o.weight_decay >= 0,
                   "Adam: lr, eps and weight_decay must be >= 0");
    TD_CHECK_VALUE(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
                   "Adam: betas must be in [0, 1), got (", o.beta1, ", ", o.beta2, ")");
  }
  detail::check_params(decoupled ? "AdamW" : "Adam", parameters());
  state_.resize(parameters().size());
}

std::vector<Tensor> Adam::parameters() const { return detail::flatten_groups(groups_); }

void Adam::step() {
  // Once the counts live on the devices (capturable, or a GradScaler used step_unless), they are
  // counted there.
  bool on_device = std::any_of(state_.begin(), state_.end(),
                               [](const State& s) { return s.device_step.defined(); });
  for (const Group& g : groups_) on_device = on_device || g.options.capturable;
  update(on_device, {});
}

bool Adam::step_unless(const std::vector<Tensor>& found_inf) {
  update(true, found_inf);
  return true;
}

namespace {

// The flag of `device` among a GradScaler's per-device flags (undefined when there are none).
Tensor flag_for(Device device, const std::vector<Tensor>& found_inf) {
  if (found_inf.empty()) return {};
  for (const Tensor& f : found_inf)
    if (f.device() == device) return f;
  ::tandem::detail::fail<ValueError>("Adam: step_unless was given found_inf flags on ",
                                     found_inf.size(), " device(s), none on ", device,
                                     ", where parameters have gradients");
  return {};
}

}  // namespace

void Adam::update(bool on_device, const std::vector<Tensor>& found_inf) {
  NoGradGuard no_grad;
  // Parameters of a group that share a device and a step count share every scalar of the update:
  // one adam_step_many call each (on CUDA one launch per 48 tensors, not one per tensor). On the
  // device each tensor's count is read by the kernel, so a device's tensors are one batch.
  struct Batch {
    Device device;
    int64_t step;
    std::vector<AdamSlot> slots;
  };
  std::vector<Tensor> grads;
  grads.reserve(state_.size());  // never reallocated: the slots point into it
  size_t i = 0;
  for (Group& g : groups_) {
    std::vector<Batch> batches;
    for (Tensor& p : g.params) {
      State& s = state_[i++];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      // A captured step repeats what it recorded: state made inside the capture would be made
      // (zeroed) again at every replay, and a count on the host would never advance.
      TD_CHECK_VALUE((s.exp_avg.defined() && s.device_step.defined()) || !p.device().is_cuda() ||
                         !cuda::is_capturing(p.device().index()),
                     decoupled_ ? "AdamW" : "Adam", ": parameter ", i - 1, " has no step count on ",
                     p.device(),
                     " yet, and a CUDA graph is capturing its step\n  hint: "
                     "AdamOptions{.capturable = true}, and a step before capturing (warm up)");
      if (!s.exp_avg.defined()) {
        s.exp_avg = zeros_like(p);
        s.exp_avg_sq = zeros_like(p);
      }
      if (on_device && !s.device_step.defined())
        s.device_step = full({}, double(s.step), {.dtype = kFloat32, .device = p.device()});
      if (!on_device) ++s.step;
      const int64_t key = on_device ? 0 : s.step;
      grads.push_back(detail::contiguous_grad("Adam", p, grad));
      auto b = std::find_if(batches.begin(), batches.end(), [&](const Batch& x) {
        return x.device == p.device() && x.step == key;
      });
      if (b == batches.end()) b = batches.insert(batches.end(), Batch{p.device(), key, {}});
      b->slots.push_back(
          {&p, &grads.back(), &s.exp_avg, &s.exp_avg_sq, on_device ? &s.device_step : nullptr});
    }
    const AdamOptions& o = g.options;
    for (const Batch& b : batches) {
      const AdamParams ap{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, b.step, decoupled_};
      if (on_device)
        kernels(b.device).adam_step_many_unless(b.slots, ap, flag_for(b.device, found_inf));
      else
        kernels(b.device).adam_step_many(b.slots, ap);
      for (const AdamSlot& slot : b.slots) tandem::detail::bump_version(*slot.param);
    }
  }
}

OptimizerState Adam::state_dict() const {
  OptimizerState out;
  nlohmann::json groups = nlohmann::json::array();
  size_t i = 0;
  for (const Group& g : groups_) {
    nlohmann::json params = nlohmann::json::array();
    for (size_t k = 0; k < g.params.size(); ++k, ++i) {
      params.push_back(i);
      const State& s = state_[i];
      if (!s.exp_avg.defined()) continue;
      // float32 [], as torch (a copy of the device's count, read at saving)
      out.tensors.emplace_back(str("state.", i, ".step"), s.device_step.defined()
                                                              ? s.device_step.clone()
                                                              : scalar_tensor(double(s.step)));
      out.tensors.emplace_back(str("state.", i, ".exp_avg"), s.exp_avg);
      out.tensors.emplace_back(str("state.", i, ".exp_avg_sq"), s.exp_avg_sq);
    }
    const AdamOptions& o = g.options;
    groups.push_back({{"lr", o.lr},
                      {"betas", {o.beta1, o.beta2}},
                      {"eps", o.eps},
                      {"weight_decay", o.weight_decay},
                      {"amsgrad", false},
                      {"maximize", false},
                      {"foreach", nullptr},
                      {"capturable", o.capturable},
                      {"differentiable", false},
                      {"fused", nullptr},
                      {"params", params}});
  }
  out.param_groups_json = groups.dump();
  return out;
}

void Adam::load_state_dict(const OptimizerState& state) {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  const nlohmann::json groups = detail::parse_groups(name, state.param_groups_json, groups_.size());
  for (size_t k = 0; k < groups_.size(); ++k) {
    const auto& j = groups[k];
    detail::check_group_size(name, j, k, groups_[k].params.size());
    AdamOptions& o = groups_[k].options;
    o.lr = j.at("lr");
    o.beta1 = j.at("betas").at(0);
    o.beta2 = j.at("betas").at(1);
    o.eps = j.at("eps");
    o.weight_decay = j.at("weight_decay");
  }
  const std::vector<Tensor> params = parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    State& s = state_[i];
    const Tensor step = detail::state_tensor(name, state, i, "step", params[i], false, true);
    s.step = step.defined() ? int64_t(step.item()) : 0;
    s.device_step = Tensor();  // made again from `step` if step_unless is used
    s.exp_avg = detail::state_tensor(name, state, i, "exp_avg", params[i], step.defined());
    s.exp_avg_sq = detail::state_tensor(name, state, i, "exp_avg_sq", params[i], step.defined());
  }
}

}  // namespace tandem::optim
