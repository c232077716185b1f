// tools/train/epoch.cpp — the training loop body and the evaluation loop. Loss and accuracy are
// read back after every step (item()), which also keeps the progress line honest about speed.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/parallel/comm/broadcast_object.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>

#include "augment.h"
#include "epoch.h"
#include "progress.h"

namespace tandem::tools {
namespace {

using Clock = std::chrono::steady_clock;

// Correct predictions in a batch, without recording anything for autograd.
int64_t count_correct(const Tensor& logits, const Tensor& y) {
  NoGradGuard no_grad;
  return int64_t(logits.argmax(1).eq(y).to(kFloat32).sum().item());
}

// " | scale 32768, 2 skipped" for the progress lines under --amp fp16.
std::string scaler_note(const optim::GradScaler* scaler) {
  if (scaler == nullptr || !scaler->is_enabled()) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " | scale %g, %lld skipped", scaler->get_scale(),
                (long long)scaler->skipped_steps());
  return buf;
}

// Sums over a stretch of steps: loss is summed per image, so means weight batches by size.
struct Totals {
  double loss = 0;
  int64_t correct = 0, images = 0, steps = 0;
  void add(double mean_loss, int64_t right, int64_t n) {
    loss += mean_loss * double(n), correct += right, images += n, ++steps;
  }
  double mean_loss() const { return images ? loss / double(images) : 0; }
  double acc() const { return images ? double(correct) / double(images) : 0; }
};

}  // namespace

double unix_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void check_evaluation_finite(double loss, parallel::Communicator* group, const std::string& when,
                             const std::string& dir) {
  bool finite = std::isfinite(loss);
  // Rank 0 evaluated: its verdict is everyone's, so that every rank stops with the same reason
  // (the others would otherwise wait in the next step's collective for a rank that has gone).
  if (group != nullptr) finite = parallel::broadcast_string(*group, finite ? "1" : "0") == "1";
  if (finite) return;
  const bool lead = group == nullptr || group->rank() == 0;
  detail::fail<NonFiniteError>(
      "train: the model diverged: ",
      lead ? str("its evaluation loss is ", loss) : "rank 0's evaluation is not finite", " ", when,
      dir.empty()
          ? std::string("")
          : str("; the checkpoint in ", dir, " was not replaced (it holds the last good one)"),
      "\n  hint: lower --lr");
}

PassResult train_epoch(EpochSetup& s, int64_t epoch, int64_t& global_step) {
  s.step.model->train();
  s.loader.set_epoch(epoch - 1);
  ProgressLine progress(s.interactive, epoch, s.steps);
  const int64_t log_every = std::max<int64_t>(1, (s.steps + 9) / 10);  // ~10% of the epoch
  Totals all, interval;
  const int64_t skipped_before = s.update.skipped;
  optim::GradScaler* const scaler = s.step.scaler;  // --amp fp16: skips inf/NaN steps itself
  const bool scaling = scaler != nullptr && scaler->is_enabled();
  const int64_t scaler_skipped_before = scaling ? scaler->skipped_steps() : 0;
  const Clock::time_point start = Clock::now();
  Clock::time_point interval_start = start;

  for (auto it = s.loader.begin(); it != s.loader.end(); ++it) {
    const data::Batch& batch = *it;
    const uint64_t aug_seed = augment_seed(s.seed, epoch - 1, it.batch_index());
    // Unaugmented, x is the loader's pinned batch and can upload asynchronously; augmented, it
    // is a fresh pageable tensor.
    const Device device = s.step.device;
    const Tensor x = random_translate(batch.x, s.augment, s.fill, aug_seed)
                         .to(device, /*non_blocking=*/s.augment == 0);
    const Tensor y = batch.y.to(device, /*non_blocking=*/true);  // pinned when on a GPU

    // --cuda-graphs: zero_grad, the step and the optimizer's are one replay, already applied.
    Tensor loss, logits;
    if (s.graphed) {
      std::tie(loss, logits) = (*s.graphed)(x, y);
    } else {
      s.update.optimizer.zero_grad();
      const StepResult r = train_step(s.step, x, y);
      loss = r.loss, logits = r.logits;
    }
    const double l = loss.item();
    const std::string when =
        str("epoch ", epoch, ", step ", all.steps + 1, " (global step ", global_step + 1, ")");
    if (s.graphed) {  // the replay is the whole step: a non-finite one was applied with it
      TD_CHECK_AS(NonFiniteError, std::isfinite(l), "train: the loss is ", l, " at ", when,
                  "; under --cuda-graphs the step was applied with it (the replay is the whole "
                  "step)\n  hint: lower --lr, or run without --cuda-graphs and with "
                  "--skip-nonfinite");
      if (s.update.scheduler) s.update.scheduler->step();
    } else if (!apply_update(s.update, l, when)) {  // skipped (--skip-nonfinite)
      if (++all.steps == s.steps) break;
      continue;
    }
    ++global_step;
    if (s.after_first_step) std::exchange(s.after_first_step, nullptr)();  // once per run

    const int64_t right = count_correct(logits, y.to(logits.device())), n = y.size(0);
    all.add(l, right, n);
    interval.add(l, right, n);
    const std::string note = scaler_note(scaler);
    if (!s.quiet) progress.update(all.steps, all.mean_loss(), all.acc(), note);
    if (all.steps % log_every == 0 || all.steps == s.steps) {
      const double secs = seconds_since(interval_start);
      const double rate = secs > 0 ? double(interval.images * s.world) / secs : 0;
      s.metrics.write({.time = unix_time(),
                       .epoch = epoch,
                       .step = global_step,
                       .split = "train",
                       .loss = interval.mean_loss(),
                       .acc = interval.acc(),
                       .lr = s.update.optimizer.lr(0),
                       .samples_per_s = rate,
                       .loss_scale = scaling ? scaler->get_scale() : 0,
                       .skipped_steps = scaling ? scaler->skipped_steps() : -1});
      if (!s.quiet) progress.log(all.steps, interval.mean_loss(), interval.acc(), rate, note);
      interval = Totals();
      interval_start = Clock::now();
    }
    if (all.steps == s.steps) break;  // --max-steps: leaving the loop stops the loader's pass
  }
  if (!s.quiet) progress.finish();
  const double secs = seconds_since(start);
  return {.loss = all.mean_loss(),
          .acc = all.acc(),
          .images = all.images,
          .samples_per_s = secs > 0 ? double(all.images * s.world) / secs : 0,
          .skipped = s.update.skipped - skipped_before,
          .scaler_skipped = scaling ? scaler->skipped_steps() - scaler_skipped_before : 0};
}

PassResult evaluate(Setup& s, data::DataLoader& loader) {
  NoGradGuard no_grad;
  s.model->eval();  // batch norm uses its running statistics, dropout is off
  Totals all;
  const Clock::time_point start = Clock::now();
  for (const data::Batch& batch : loader) {
    const Tensor logits = predict(s, batch.x.to(s.device));
    const Tensor y = batch.y.to(logits.device());
    all.add(cross_entropy(logits, y).item(), count_correct(logits, y), y.size(0));
  }
  s.model->train();
  const double secs = seconds_since(start);
  return {.loss = all.mean_loss(),
          .acc = all.acc(),
          .images = all.images,
          .samples_per_s = secs > 0 ? double(all.images) / secs : 0};
}

}  // namespace tandem::tools
