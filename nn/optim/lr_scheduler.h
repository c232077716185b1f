// nn/optim/lr_scheduler.h — learning-rate schedules. Each sets every group's lr from its base lr
// and the number of step() calls so far (call step() once per epoch or per iteration, as the
// schedule is meant). Warm-up is the schedule for large batches (Goyal et al. 2017).
#pragma once

#include <tandem/nn/optim/optimizer.h>
#include <cstdint>
#include <vector>

namespace tandem::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  /// Advances the schedule by one and writes the new lr into the optimizer.
  void step();
  int64_t last_step() const { return step_; }
  /// Sets the schedule's position (when resuming) and writes the matching lr.
  void set_step(int64_t step);
  std::vector<double> last_lr() const;

 protected:
  /// A group's lr at `step` (0 = before any step()) given its base lr.
  virtual double lr_at(int64_t step, double base) const = 0;
  /// Writes the lr for the current step; each schedule's constructor calls it (as PyTorch's do, so
  /// the first step already runs at the schedule's starting lr).
  void apply();

 private:
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

/// lr = base · γ^⌊step / step_size⌋
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = η_min + (base − η_min)·(1 + cos(π·step / T_max)) / 2, held at η_min after T_max
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0);

 protected:
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// lr rises linearly from start_factor·base to base over warmup_steps, then (optionally) follows
/// a cosine decay to 0 over the remaining total_steps − warmup_steps.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, int64_t warmup_steps, double start_factor = 0.1,
               int64_t total_steps = 0);

 protected:
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t warmup_, total_;
  double start_;
};

/// nanoGPT's get_lr: a linear warm-up to base over warmup_steps (base·(step + 1)/(warmup + 1)),
/// then a cosine decay to min_lr at decay_steps, held there after.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t decay_steps, double min_lr);

 protected:
  double lr_at(int64_t step, double base) const override;

 private:
  int64_t warmup_, decay_;
  double min_lr_;
};

}  // namespace tandem::optim
