// nn/optim/lr_scheduler.cpp — the schedules, as closed forms of the step count (so resuming at
// step k gives exactly the lr an uninterrupted run has at step k).
#include <tandem/core/check.h>
#include <tandem/nn/optim/lr_scheduler.h>
#include <cmath>

namespace tandem::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_groups(); ++g) base_lrs_.push_back(optimizer.lr(g));
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t step) {
  step_ = step;
  apply();
}

void LRScheduler::apply() {
  for (size_t g = 0; g < base_lrs_.size(); ++g) optimizer_.set_lr(g, lr_at(step_, base_lrs_[g]));
}

std::vector<double> LRScheduler::last_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  TD_CHECK_VALUE(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  apply();
}

double StepLR::lr_at(int64_t step, double base) const {
  return base * std::pow(gamma_, double(step / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  TD_CHECK_VALUE(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
  apply();
}

double CosineAnnealingLR::lr_at(int64_t step, double base) const {
  const double t = double(std::min(step, t_max_)) / double(t_max_);
  return eta_min_ + (base - eta_min_) * 0.5 * (1 + std::cos(M_PI * t));
}

LinearWarmup::LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor,
                           int64_t total_steps)
    : LRScheduler(opt), warmup_(warmup_steps), total_(total_steps), start_(start_factor) {
  TD_CHECK_VALUE(warmup_steps >= 0 && start_factor > 0 && start_factor <= 1,
                 "LinearWarmup: need warmup_steps >= 0 and start_factor in (0, 1]");
  TD_CHECK_VALUE(total_steps == 0 || total_steps > warmup_steps,
                 "LinearWarmup: total_steps must exceed warmup_steps");
  apply();
}

double LinearWarmup::lr_at(int64_t step, double base) const {
  if (step < warmup_) return base * (start_ + (1 - start_) * double(step) / double(warmup_));
  if (total_ == 0) return base;
  const double t = double(std::min(step, total_) - warmup_) / double(total_ - warmup_);
  return base * 0.5 * (1 + std::cos(M_PI * t));
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t decay_steps,
                               double min_lr)
    : LRScheduler(opt), warmup_(warmup_steps), decay_(decay_steps), min_lr_(min_lr) {
  TD_CHECK_VALUE(warmup_steps >= 0 && decay_steps > warmup_steps && min_lr >= 0,
                 "WarmupCosineLR: need 0 <= warmup_steps < decay_steps and min_lr >= 0, got ",
                 warmup_steps, ", ", decay_steps, ", ", min_lr);
  apply();
}

double WarmupCosineLR::lr_at(int64_t step, double base) const {
  if (step < warmup_) return base * double(step + 1) / double(warmup_ + 1);
  if (step > decay_) return min_lr_;
  const double t = double(step - warmup_) / double(decay_ - warmup_);
  return min_lr_ + 0.5 * (1 + std::cos(M_PI * t)) * (base - min_lr_);
}

}  // namespace tandem::optim
