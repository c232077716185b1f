// tools/cli_flags.h — the flags `tandem train` and `tandem plan` share (a plan is of a training
// run, described by the same flags), with CLI11's validators. CLI11 is included by main.cpp and
// cli_flags.cpp only (it costs seconds per translation unit).
#pragma once

#include <CLI/CLI.hpp>

#include "commands.h"

namespace tandem::tools {

/// A number a flag needs, as a reason when the value is not one. (CLI11's own PositiveNumber
/// answers "--lr 0" with a range whose ends print as 309-digit numbers.)
CLI::Validator number_check(bool zero_allowed);
inline const CLI::Validator kPositive = number_check(false);
inline const CLI::Validator kNonNegative = number_check(true);

// --lr and --augment default to values that depend on other flags, and --model gpt has its own
// defaults for --batch-size, --optimizer and --weight-decay; these remember whether they were
// given at all.
struct TrainExtras {
  double lr = 0;
  int augment = 0;
  CLI::Option *lr_opt = nullptr, *augment_opt = nullptr, *batch_opt = nullptr,
              *optimizer_opt = nullptr, *decay_opt = nullptr;
};

/// --model gpt's own flags (nanoGPT's names, dashed).
void add_gpt_flags(CLI::App* cmd, GptOptions& g);
/// Every flag of `tandem train` on `cmd`.
void add_train_flags(CLI::App* cmd, TrainOptions& t, TrainExtras& x);
/// After parsing: which flags were given, and the defaults that depend on others.
void finish_train_flags(const CLI::App* cmd, TrainOptions& t, const TrainExtras& x);

}  // namespace tandem::tools
