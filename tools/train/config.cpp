// tools/train/config.cpp — default resolution, checks, and the JSON form of a run's flags.
#include <tandem/core/check.h>
#include <nlohmann/json.hpp>

#include "config.h"

namespace tandem::tools {
namespace {

nlohmann::ordered_json to_json(const TrainOptions& o) {
  nlohmann::ordered_json j;
  j["model"] = o.model;
  j["dataset"] = o.dataset;
  j["device"] = o.device;
  j["epochs"] = o.epochs;
  j["batch_size"] = o.batch_size;
  j["lr"] = o.lr.value_or(0);
  j["optimizer"] = o.optimizer;
  j["momentum"] = o.momentum;
  j["weight_decay"] = o.weight_decay;
  j["schedule"] = o.schedule;
  j["augment"] = o.augment.value_or(0);
  j["seed"] = o.seed;
  j["workers"] = o.workers;
  j["checkpoint"] = o.checkpoint;
  j["resume"] = o.resume;
  j["log_dir"] = o.log_dir;
  j["max_steps"] = o.max_steps;
  j["data_parallel"] = o.data_parallel;
  j["activation_checkpointing"] = o.activation_checkpointing;
  j["pipeline"] = o.pipeline;
  j["chunks"] = o.chunks;
  j["pipeline_schedule"] = o.pipeline_schedule;
  j["amp"] = o.amp;
  return j;
}

bool one_of(const std::string& v, std::initializer_list<const char*> choices) {
  for (const char* c : choices)
    if (v == c) return true;
  return false;
}

std::vector<Device> device_list(const char* flag, const std::string& list) {
  std::vector<Device> devices;
  std::string rest = list;
  for (size_t comma; !rest.empty();
       rest = comma == std::string::npos ? "" : rest.substr(comma + 1)) {
    comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    TD_CHECK_VALUE(!name.empty(), "train: ", flag, " ", list,
                   " has an empty device name (expected a list such as cpu:0,cpu:1)");
    devices.emplace_back(name);
  }
  TD_CHECK_VALUE(!devices.empty(), "train: ", flag,
                 " needs a list of devices, such as cpu:0,cpu:1");
  return devices;
}

// A device list's first device is the run's device: --device may only repeat it.
void use_first_device(TrainOptions& o, const char* flag, const std::string& list,
                      const std::vector<Device>& devices, const char* role) {
  TD_CHECK_VALUE(o.device == TrainOptions{}.device || Device(o.device) == devices[0],
                 "train: --device ", o.device, " is not the first device of ", flag, " ", list,
                 " (", devices[0], " ", role, "); leave --device out");
  o.device = devices[0].str();
}

}  // namespace

TrainOptions resolve_config(TrainOptions o) {
  TD_CHECK_VALUE(one_of(o.model, {"mlp", "cnn", "cnn-bn"}), "train: --model ", o.model,
                 " is not one of mlp, cnn, cnn-bn");
  TD_CHECK_VALUE(one_of(o.optimizer, {"sgd", "adam", "adamw"}), "train: --optimizer ", o.optimizer,
                 " is not one of sgd, adam, adamw");
  TD_CHECK_VALUE(one_of(o.schedule, {"none", "step", "cosine", "warmup-cosine"}),
                 "train: --schedule ", o.schedule,
                 " is not one of none, step, cosine, warmup-cosine");
  if (!o.lr) o.lr = o.optimizer == "sgd" ? 0.05 : (o.model == "cnn-bn" ? 2e-3 : 1e-3);
  if (!o.augment) o.augment = o.model == "cnn-bn" ? 2 : 0;
  TD_CHECK_VALUE(o.epochs >= 1, "train: --epochs must be at least 1, but got ", o.epochs);
  TD_CHECK_VALUE(o.batch_size >= 1, "train: --batch-size must be at least 1, but got ",
                 o.batch_size);
  TD_CHECK_VALUE(*o.lr > 0, "train: --lr must be positive, but got ", *o.lr);
  TD_CHECK_VALUE(o.momentum >= 0 && o.momentum < 1, "train: --momentum must be in [0, 1), but got ",
                 o.momentum);
  TD_CHECK_VALUE(o.weight_decay >= 0, "train: --weight-decay must be >= 0, but got ",
                 o.weight_decay);
  TD_CHECK_VALUE(*o.augment >= 0 && *o.augment <= 8,
                 "train: --augment must be between 0 and 8 pixels, but got ", *o.augment);
  TD_CHECK_VALUE(o.workers >= 0, "train: --workers must be >= 0, but got ", o.workers);
  TD_CHECK_VALUE(o.max_steps >= 0, "train: --max-steps must be >= 0, but got ", o.max_steps);
  TD_CHECK_VALUE(!o.resume || !o.checkpoint.empty(),
                 "train: --resume needs --checkpoint DIR (the directory to resume from)");
  if (!o.data_parallel.empty()) {
    TD_CHECK_VALUE(!o.ddp,
                   "train: --data-parallel and --ddp are two ways of using several devices; "
                   "choose one (--ddp: one process per device under `tandem launch`)");
    use_first_device(o, "--data-parallel", o.data_parallel,
                     device_list("--data-parallel", o.data_parallel), "holds the model");
  }
  TD_CHECK_VALUE(one_of(o.amp, {"none", "bf16", "fp16"}), "train: --amp ", o.amp,
                 " is not one of none, bf16, fp16");
  TD_CHECK_VALUE(o.chunks >= 1, "train: --chunks must be >= 1, but got ", o.chunks);
  TD_CHECK_VALUE(one_of(o.pipeline_schedule, {"gpipe", "1f1b"}), "train: --pipeline-schedule ",
                 o.pipeline_schedule, " is not one of gpipe, 1f1b");
  if (!o.pipeline.empty()) {
    TD_CHECK_VALUE(!o.ddp && o.data_parallel.empty(),
                   "train: --pipeline cannot be combined with --ddp or --data-parallel; choose one "
                   "way of using several devices");
    TD_CHECK_VALUE(o.model != "cnn-bn",
                   "train: --pipeline needs --model mlp or cnn: cnn-bn's batch norm would "
                   "normalise each micro-batch on its own, which trains a different model");
    TD_CHECK_VALUE(o.batch_size >= o.chunks, "train: --chunks ", o.chunks,
                   " is more than --batch-size ", o.batch_size,
                   "; every micro-batch needs at least one image");
    use_first_device(o, "--pipeline", o.pipeline, device_list("--pipeline", o.pipeline),
                     "takes the batches");
  }
  return o;
}

Placement resolve_placement(const TrainOptions& o) {
  if (o.ddp) return {Parallelism::DDP, Device(o.device), {}};
  if (!o.data_parallel.empty()) {
    const std::vector<Device> d = device_list("--data-parallel", o.data_parallel);
    return {Parallelism::DataParallel, d[0], d};
  }
  if (!o.pipeline.empty()) {
    const std::vector<Device> d = device_list("--pipeline", o.pipeline);
    return {Parallelism::Pipeline, d[0], d};
  }
  return {Parallelism::None, Device(o.device), {}};
}

std::string config_json(const TrainOptions& options) { return to_json(options).dump(); }

std::vector<std::pair<std::string, std::string>> config_rows(const TrainOptions& options) {
  std::vector<std::pair<std::string, std::string>> rows;
  const nlohmann::ordered_json j = to_json(options);  // items() refers to it: keep it alive
  for (const auto& [key, value] : j.items()) {
    std::string flag = "--" + key;
    for (char& c : flag)
      if (c == '_') c = '-';
    rows.emplace_back(flag, value.is_string() ? value.get<std::string>() : value.dump());
  }
  return rows;
}

std::vector<std::string> config_differences(const std::string& saved_json,
                                            const TrainOptions& options) {
  const nlohmann::json saved = nlohmann::json::parse(saved_json, nullptr, false);
  if (!saved.is_object()) return {"the checkpoint's config is not valid JSON"};
  std::vector<std::string> out;
  const nlohmann::ordered_json now = to_json(options);  // items() refers to it: keep it alive
  for (const auto& [key, value] : now.items()) {
    if (one_of(key, {"epochs", "resume", "log_dir", "checkpoint", "workers"})) continue;
    if (!saved.contains(key)) continue;
    // Both sides are dumps of the same kinds of values, so equal values print alike.
    if (value.dump() != saved[key].dump())
      out.push_back(key + " " + saved[key].dump() + " -> " + value.dump());
  }
  return out;
}

}  // namespace tandem::tools
