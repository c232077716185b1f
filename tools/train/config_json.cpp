// tools/train/config_json.cpp — a run's flags as JSON (the checkpoint's config.json and the
// report's table), what changed since a checkpoint, and a GPT's shape read back.
#include <tandem/core/check.h>
#include <nlohmann/json.hpp>
#include <set>

#include "config.h"
#include "moe_setup.h"

namespace tandem::tools {
namespace {

// --model gpt's own flags.
void add_gpt(nlohmann::ordered_json& j, const GptOptions& g) {
  j["text"] = g.text;
  j["n_layer"] = g.n_layer;
  j["n_head"] = g.n_head;
  j["n_embd"] = g.n_embd;
  j["block_size"] = g.block_size;
  j["dropout"] = g.dropout;
  j["bias"] = g.bias;
  j["max_iters"] = g.max_iters;
  j["warmup_iters"] = g.warmup_iters;
  j["eval_interval"] = g.eval_interval;
  j["eval_iters"] = g.eval_iters;
  j["log_interval"] = g.log_interval;
  j["min_lr"] = g.min_lr;
  j["beta2"] = g.beta2;
  j["grad_clip"] = g.grad_clip;
  j["vocab_multiple"] = g.vocab_multiple;
  j["flash_attention"] = g.flash_attention;
  add_experts(j, g);  // moe_setup.cpp
}

// The flags that apply to the run's model, in flag order.
nlohmann::ordered_json to_json(const TrainOptions& o) {
  const bool gpt = o.model == "gpt";
  nlohmann::ordered_json j;
  j["model"] = o.model;
  if (gpt) {
    add_gpt(j, o.gpt);
  } else {
    j["dataset"] = o.dataset;
    j["epochs"] = o.epochs;
  }
  j["device"] = o.device;
  j["batch_size"] = o.batch_size;
  j["lr"] = o.lr.value_or(0);
  j["optimizer"] = o.optimizer;
  if (!gpt) j["momentum"] = o.momentum;
  j["weight_decay"] = o.weight_decay;
  j["schedule"] = o.schedule;
  if (!gpt) j["augment"] = o.augment.value_or(0);
  j["seed"] = o.seed;
  if (!gpt) j["workers"] = o.workers;
  j["checkpoint"] = o.checkpoint;
  j["resume"] = o.resume;
  j["log_dir"] = o.log_dir;
  if (!gpt) j["max_steps"] = o.max_steps;
  j["data_parallel"] = o.data_parallel;
  j["activation_checkpointing"] = o.activation_checkpointing;
  j["pipeline"] = o.pipeline;
  j["chunks"] = o.chunks;
  j["pipeline_schedule"] = o.pipeline_schedule;
  j["virtual_stages"] = o.virtual_stages;
  j["amp"] = o.amp;
  j["zero"] = o.zero;
  j["sharded_checkpoint"] = o.sharded_checkpoint;
  if (gpt) {
    j["tp"] = o.tp;
    j["pp"] = o.pp;
    j["dp"] = o.dp;
    j["sequence_parallel"] = o.sequence_parallel;
    j["cp"] = o.cp;
    j["cp_algorithm"] = o.cp_algorithm;
    if (o.ep > 1) j["ep"] = o.ep;
  }
  return j;
}

}  // namespace

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
    static const std::set<std::string> not_the_run = {
        "epochs", "max_iters", "resume", "log_dir", "checkpoint", "workers", "sharded_checkpoint"};
    if (not_the_run.count(key)) continue;
    if (!saved.contains(key)) continue;
    // Both sides are dumps of the same kinds of values, so equal values print alike.
    if (value.dump() != saved[key].dump())
      out.push_back(key + " " + saved[key].dump() + " -> " + value.dump());
  }
  return out;
}

GptOptions gpt_options_from_json(const std::string& json, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  GptOptions g;
  try {
    TD_CHECK_AS(DataError, j.is_object() && j.value("model", "") == "gpt", path,
                ": not a checkpoint of `tandem train --model gpt` (its config has no gpt model)");
    g.n_layer = j.at("n_layer").get<int64_t>();
    g.n_head = j.at("n_head").get<int64_t>();
    g.n_embd = j.at("n_embd").get<int64_t>();
    g.block_size = j.at("block_size").get<int64_t>();
    g.dropout = j.at("dropout").get<double>();
    g.bias = j.at("bias").get<bool>();
    g.vocab_multiple = j.value("vocab_multiple", int64_t{1});  // older checkpoints: unpadded
    read_experts(j, g);                                        // a dense GPT's config has none
  } catch (const nlohmann::json::exception& e) {
    detail::fail<DataError>(path, ": the GPT's config is incomplete (", e.what(), ")");
  }
  return g;
}

}  // namespace tandem::tools
