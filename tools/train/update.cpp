// tools/train/update.cpp — the decision, then unscale, clip, step and schedule.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <cmath>
#include <cstdio>

#include "update.h"

namespace tandem::tools {

bool apply_update(Updater& u, double loss, const std::string& when) {
  Setup& s = u.setup;
  const UpdatePolicy& p = u.policy;
  const bool scaling = s.scaler != nullptr && s.scaler->is_enabled();
  bool ok = std::isfinite(loss);
  if (ok && p.check_gradients && !scaling) ok = gradients_finite(u.optimizer, nullptr);
  // Each rank may hold other gradients (--tp's slices, --pp's stages, --zero's shards) and its
  // own loss: every rank applies, skips or stops together.
  ok = all_ranks_agree(ok, p.world, s.device);
  if (!ok) {
    const bool loss_ok = std::isfinite(loss);
    TD_CHECK_AS(NonFiniteError, p.skip_nonfinite, "train: the loss is ",
                std::isnan(loss) ? std::string("NaN") : str(loss),
                loss_ok ? " but a gradient (on some rank) is NaN or inf" : "", " at ", when,
                "; the step was not applied (", p.kept,
                ")\n  hint: lower --lr, or pass --skip-nonfinite to skip such steps");
    ++u.skipped;
    if (!p.quiet)
      std::fprintf(stderr, "train: %s: loss %g%s, step skipped (%lld so far)\n", when.c_str(), loss,
                   loss_ok ? " but a gradient is not finite" : "", (long long)u.skipped);
    if (u.scheduler && p.skipped_steps_advance_schedule) u.scheduler->step();
    return false;
  }
  if (scaling) s.scaler->unscale_(u.optimizer);  // the clip sees the true gradients
  if (p.clip > 0) clip_gradients(s, p.clip);
  step_optimizer(s, u.optimizer);
  if (u.scheduler) u.scheduler->step();
  return true;
}

void step_optimizer(Setup& s, optim::Optimizer& optimizer) {
  if (s.scaler != nullptr && s.scaler->is_enabled()) {
    s.scaler->step(optimizer);  // skips, and counts it, on inf/NaN gradients
    s.scaler->update();
  } else {
    optimizer.step();
  }
}

// One sum over all of them, read back once: a NaN or inf in any makes it non-finite (so does a
// sum that overflows float32; such gradients are no better). No abs(), which would copy every
// gradient each step.
bool gradients_finite(const optim::Optimizer& optimizer, parallel::Communicator* group) {
  NoGradGuard no_grad;
  Tensor total;
  for (const Tensor& p : optimizer.parameters()) {
    if (!p.grad().defined()) continue;
    // A model split over devices (--pipeline) has its gradients on several: the total lives on
    // the first parameter's device.
    Tensor s = p.grad().sum().to(kFloat64);
    if (total.defined()) s = s.to(total.device());
    total = total.defined() ? total + s : s;
  }
  const bool finite = !total.defined() || std::isfinite(total.item());
  return all_ranks_agree(finite, group, optimizer.parameters().front().device());
}

bool all_ranks_agree(bool ok, parallel::Communicator* group, Device device) {
  if (group == nullptr) return ok;
  Tensor bad = full({1}, ok ? 0.0 : 1.0, {.device = device});
  group->all_reduce(bad, ReduceOp::Max)->wait();
  return bad.to(Device::cpu()).item() == 0;
}

}  // namespace tandem::tools
