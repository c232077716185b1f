// tools/train/update.h — the second half of every training step, after backward, written once for
// every trainer (the GPT's iterations, the image models' epochs) and every layout: whether the
// step may be applied (a non-finite loss or gradient, decided by every rank together), the
// unscale (--amp fp16), the clip (one device's norm over the placement table), the optimizer's
// step under the gradient scaler, and the schedule. llm.c's step reads the same way:
// gpt2_backward_and_reduce, gpt2_calculate_grad_norm, gpt2_update.
#pragma once

#include <tandem/nn/optim/lr_scheduler.h>
#include <tandem/nn/optim/optimizer.h>
#include <string>

#include "step.h"

namespace tandem::tools {

/// A step's loss or gradients were NaN or inf (the step was not applied), or parameters were
/// about to be saved with NaN or inf in them (they were not).
struct NonFiniteError : Error {
  using Error::Error;
};

struct UpdatePolicy {
  double clip = 0;              // --grad-clip: the global gradient norm's bound (0: no clip)
  bool skip_nonfinite = false;  // --skip-nonfinite: skip such a step rather than stop
  // Also refuse a step whose gradients are not finite behind a finite loss (one sum over them,
  // read back). Under the fp16 scaler the scaler does that itself.
  bool check_gradients = true;
  // Whether a skipped step still advances the schedule: the GPT's lr is a function of the
  // iteration; the image trainer's of the steps taken (its checkpoint's global step).
  bool skipped_steps_advance_schedule = true;
  parallel::Communicator* world = nullptr;  // every rank of the run (null: one process)
  std::string kept;                         // what a --checkpoint holds then, for the error
  bool quiet = false;                       // no "step skipped" line (ranks other than 0)
};

/// What the update changes: the optimizer, its schedule (null: a constant lr), the policy, and
/// the steps skipped so far.
struct Updater {
  Setup& setup;
  optim::Optimizer& optimizer;
  optim::LRScheduler* scheduler;
  UpdatePolicy policy;
  int64_t skipped = 0;
};

/// After backward, with the batch's `loss` (this rank's): applies the step, or skips it on every
/// rank (with --skip-nonfinite) and says so on stderr, naming `when` ("iteration 12", "epoch 2,
/// step 5 (global step 17)"). Without --skip-nonfinite a non-finite step is a NonFiniteError
/// on every rank, naming `when`; nothing is applied. Returns whether the step was applied.
bool apply_update(Updater& u, double loss, const std::string& when);

/// The optimizer's step under the gradient scaler (which skips a step with inf or NaN gradients
/// and moves its scale), or plainly: apply_update's last part, and what a --cuda-graphs replay
/// records.
void step_optimizer(Setup& s, optim::Optimizer& optimizer);

/// Whether every gradient the optimizer holds is finite (one sum, read back once). `group`: the
/// ranks that must reach one answer when each holds other gradients (--zero's shards, --tp's
/// slices, --pp's stages), agreeing through an all-reduce of a flag; null when all hold the same.
bool gradients_finite(const optim::Optimizer& optimizer, parallel::Communicator* group);

/// Whether `ok` holds on every rank of `group` (one all-reduce of a flag on `device`); `ok`
/// itself without a group.
bool all_ranks_agree(bool ok, parallel::Communicator* group, Device device);

}  // namespace tandem::tools
