// tools/train/progress.h — what a training epoch shows while it runs (reference §4.5). On a
// terminal, one tqdm-style line on stderr, redrawn in place at most every 0.1 s:
//   Epoch 1:  48%|█████████▌          | 450/938 [00:05<00:05, 89.3it/s, loss=0.231, acc=0.912]
// Anywhere else (a pipe, a log file, CI) no \r ever: a plain line on stdout every ~10% of the
//   epoch 1 step 450/938 (48%) loss 0.2310 acc 0.912 89.3 img/s eta 00:05
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem::tools {

/// Whether to draw the updating line: stderr is a terminal, CI is unset, TERM is not "dumb",
/// and the user did not pass --no-progress.
bool progress_is_interactive(bool no_progress);

/// "00:05", "12:34", or "1:02:03" past an hour (tqdm's format).
std::string format_duration(double seconds);

/// Seconds from `t` to now on the steady clock (what the progress lines and reports time with).
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class ProgressLine {
 public:
  /// One epoch of `total_steps` steps. Interactive: the updating bar; otherwise plain lines.
  ProgressLine(bool interactive, int64_t epoch, int64_t total_steps);

  /// After every step, with the epoch's running loss and accuracy (interactive mode only).
  /// `note` is appended (--amp fp16: the loss scale and skipped steps).
  void update(int64_t step, double loss, double acc, const std::string& note = "");
  /// At a log point (~10% of the epoch): the plain line, with the interval's loss, accuracy and
  /// images/s (plain mode only).
  void log(int64_t step, double loss, double acc, double samples_per_s,
           const std::string& note = "");
  /// Erases the bar, so what is printed next starts on a clean line.
  void finish();

 private:
  double elapsed() const;
  bool interactive_;
  int64_t epoch_, total_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool drawn_ = false;
};

}  // namespace tandem::tools
