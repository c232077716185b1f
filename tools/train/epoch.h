// tools/train/epoch.h — one pass of training and one of evaluation, the two halves of every
// `tandem train` epoch. The training pass logs a train record every ~10% of the epoch (to
// metrics.jsonl, and as a plain line when not on a terminal) and steps the lr schedule per step.
#pragma once

#include <tandem/data/dataloader.h>
#include <tandem/nn/optim/grad_scaler.h>
#include <tandem/nn/optim/lr_scheduler.h>
#include <tandem/nn/optim/optimizer.h>
#include <cstdint>
#include <functional>

#include "graphed_step.h"
#include "metrics.h"
#include "step.h"
#include "update.h"

namespace tandem::tools {

struct EpochSetup {
  Setup& step;               // the model, placed and wrapped for its mode (step.h)
  Updater& update;           // the optimizer, its schedule and the non-finite policy (update.h)
  data::DataLoader& loader;  // shuffled training batches
  int64_t steps;             // steps to take (the loader's size, or --max-steps)
  int augment;               // max shift in pixels (0: none)
  float fill;                // the normalised value of a black pixel, for shifted borders
  uint64_t seed;             // the run's seed: augmentation = f(seed, epoch, batch)
  bool interactive;          // draw the updating progress line
  MetricsLog& metrics;
  bool quiet = false;                      // --ddp ranks other than 0: no progress output
  int world = 1;                           // ranks training together: images/s counts all of them
  std::function<void()> after_first_step;  // runs once, after this process's first step
  GraphedStep* graphed = nullptr;          // --cuda-graphs: the whole step, optimizer included
};

struct PassResult {
  double loss = 0;  // mean cross-entropy per image
  double acc = 0;   // fraction correct
  int64_t images = 0;
  double samples_per_s = 0;    // images/s over the whole pass
  int64_t skipped = 0;         // steps not taken: non-finite loss or gradients (--skip-nonfinite)
  int64_t scaler_skipped = 0;  // --amp fp16: steps the gradient scaler skipped this epoch
};

/// Before a checkpoint replaces the last one: whether rank 0's evaluation (`loss`, read on rank 0
/// only) is finite, agreed by every rank of `group` (null: one process). A model can diverge with
/// finite weights (--lr 1e30 --skip-nonfinite: about 7e29) that only its evaluation shows; it must
/// not replace a good checkpoint. Throws NonFiniteError on every rank, naming `when` and `dir`.
void check_evaluation_finite(double loss, parallel::Communicator* group, const std::string& when,
                             const std::string& dir);

/// Trains epoch `epoch` (1-based; the loader is set to epoch − 1), advancing global_step. A step
/// whose loss or gradients are not finite is never applied (apply_update): it throws
/// NonFiniteError naming the epoch and step, or with --skip-nonfinite it is skipped and counted.
PassResult train_epoch(EpochSetup& setup, int64_t epoch, int64_t& global_step);

/// Loss and accuracy of the model in eval mode, without gradients, over every batch of `loader`,
/// through the same path as training (step.h's predict; the model is put back in training mode
/// afterwards).
PassResult evaluate(Setup& s, data::DataLoader& loader);

/// Seconds since the Unix epoch, for metric records.
double unix_time();

}  // namespace tandem::tools
