// tools/train/config.cpp — default resolution and checks of a run's flags (config_json.cpp:
// their JSON form).
#include <tandem/core/check.h>
#include <tandem/parallel/ddp/comm_hook.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>

#include "checkpointing.h"
#include "config.h"
#include "moe_setup.h"

namespace tandem::tools {
namespace {

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

// --model gpt: the GPT's sizes and schedule, and the shared flags it does not use.
void check_gpt(const TrainOptions& o) {
  const GptOptions& g = o.gpt;
  TD_CHECK_VALUE(!g.flash_attention || (Device(o.device).is_cuda() && o.amp != "none"),
                 "train: --flash-attention runs attention on CUDA's tensor cores in 16 bits: it "
                 "needs --device cuda:N and --amp bf16 or fp16, not --device ",
                 o.device, " --amp ", o.amp);
  TD_CHECK_VALUE(g.n_layer >= 1 && g.n_head >= 1 && g.n_embd >= 1 && g.block_size >= 1,
                 "train: --n-layer, --n-head, --n-embd and --block-size must be at least 1, but "
                 "got ",
                 g.n_layer, ", ", g.n_head, ", ", g.n_embd, ", ", g.block_size);
  TD_CHECK_VALUE(g.n_embd % g.n_head == 0, "train: --n-embd ", g.n_embd,
                 " does not split evenly into --n-head ", g.n_head, " heads");
  TD_CHECK_VALUE(g.dropout >= 0 && g.dropout < 1, "train: --dropout must be in [0, 1), but got ",
                 g.dropout);
  TD_CHECK_VALUE(g.max_iters >= 1, "train: --max-iters must be at least 1, but got ", g.max_iters);
  TD_CHECK_VALUE(g.warmup_iters >= 0 && g.warmup_iters < g.max_iters, "train: --warmup-iters ",
                 g.warmup_iters, " must be in [0, --max-iters ", g.max_iters, ")");
  TD_CHECK_VALUE(g.eval_interval >= 1 && g.eval_iters >= 1 && g.log_interval >= 1,
                 "train: --eval-interval, --eval-iters and --log-interval must be at least 1");
  TD_CHECK_VALUE(g.min_lr >= 0, "train: --min-lr must be >= 0, but got ", g.min_lr);
  TD_CHECK_VALUE(g.beta2 >= 0 && g.beta2 < 1, "train: --beta2 must be in [0, 1), but got ",
                 g.beta2);
  TD_CHECK_VALUE(g.grad_clip >= 0, "train: --grad-clip must be >= 0 (0: off), but got ",
                 g.grad_clip);
  TD_CHECK_VALUE(g.vocab_multiple >= 1, "train: --vocab-multiple must be >= 1, but got ",
                 g.vocab_multiple);
  TD_CHECK_VALUE(o.optimizer == "adamw",
                 "train: --model gpt trains with AdamW (nanoGPT's "
                 "optimizer, weight decay on matrices only); --optimizer ",
                 o.optimizer, " is for the image models");
  TD_CHECK_VALUE(one_of(o.schedule, {"cosine", "none"}),
                 "train: --model gpt's --schedule is "
                 "cosine (warm-up, then a cosine decay to --min-lr) or none, not ",
                 o.schedule);
}

// Flags that only one kind of model reads: given for the other, each would do nothing, and the
// user would believe it had. Refused, naming the model.
void check_flags_apply(const TrainOptions& o) {
  static const char* const kImageOnly[] = {"--dataset",   "--epochs",  "--momentum",   "--augment",
                                           "--max-steps", "--workers", "--no-progress"};
  static const char* const kGptOnly[] = {"--text",           "--n-layer",         "--n-head",
                                         "--n-embd",         "--block-size",      "--dropout",
                                         "--bias",           "--max-iters",       "--warmup-iters",
                                         "--min-lr",         "--beta2",           "--grad-clip",
                                         "--vocab-multiple", "--eval-interval",   "--eval-iters",
                                         "--log-interval",   "--flash-attention", "--predict",
                                         "--profile"};
  const bool gpt = o.model == "gpt";
  for (const char* flag :
       gpt ? std::span<const char* const>(kImageOnly) : std::span<const char* const>(kGptOnly))
    TD_CHECK_VALUE(!given(o, flag), "train: ", flag, " does not apply to --model ", o.model, " (",
                   gpt ? "it is a flag of the image models mlp, cnn and cnn-bn; the GPT counts "
                         "--max-iters, not epochs or steps, on --text"
                       : "it is a flag of --model gpt",
                   ")");
  TD_CHECK_VALUE(!given(o, "--momentum") || o.optimizer == "sgd",
                 "train: --momentum is SGD's; --optimizer ", o.optimizer, " does not use it");
  for (const char* flag : {"--chunks", "--pipeline-schedule", "--virtual-stages"})
    TD_CHECK_VALUE(!given(o, flag) || !o.pipeline.empty() || o.pp > 1, "train: ", flag,
                   " describes a pipeline: it needs --pipeline DEVICES or --pp N");
}

// --cp: the GPT's sequence must split into the ranks' chunks, its heads (Ulysses) over them.
void check_context_parallel(const TrainOptions& o) {
  TD_CHECK_VALUE(one_of(o.cp_algorithm, {"ring", "ulysses"}), "train: --cp-algorithm ",
                 o.cp_algorithm, " is not one of ring, ulysses");
  TD_CHECK_VALUE(!given(o, "--cp-algorithm") || o.cp > 1,
                 "train: --cp-algorithm says how a context-parallel run attends: it needs --cp N");
  if (o.cp == 1) return;
  TD_CHECK_VALUE(o.model == "gpt", "train: --cp ", o.cp,
                 " splits a sequence's positions over the ranks: it needs --model gpt, not ",
                 o.model);
  const GptOptions& g = o.gpt;
  TD_CHECK_VALUE(g.block_size % (2 * o.cp) == 0, "train: --cp ", o.cp, ": --block-size ",
                 g.block_size, " does not split into ", 2 * o.cp,
                 " equal chunks (zig-zag: two per rank); make it a multiple of ", 2 * o.cp);
  const int64_t heads = g.n_head / o.tp;  // a tensor-parallel rank's
  TD_CHECK_VALUE(o.cp_algorithm != "ulysses" || heads % o.cp == 0, "train: --cp ", o.cp,
                 " --cp-algorithm ulysses: each rank attends for heads/", o.cp,
                 " of the heads, and a rank has ", heads, " (--n-head ", g.n_head,
                 o.tp > 1 ? str(" / --tp ", o.tp) : std::string(),
                 "); use --cp-algorithm ring, or a --cp that divides ", heads);
}

}  // namespace

bool given(const TrainOptions& o, const char* flag) {
  return std::find(o.given.begin(), o.given.end(), flag) != o.given.end();
}

TrainOptions resolve_config(TrainOptions o) {
  TD_CHECK_VALUE(one_of(o.model, {"mlp", "cnn", "cnn-bn", "gpt"}), "train: --model ", o.model,
                 " is not one of mlp, cnn, cnn-bn, gpt");
  check_flags_apply(o);
  // nanoGPT's 100 warm-up iterations would outlast a short run (--max-iters 20): unless the user
  // chose them, they shrink to fit (gpt_train says so).
  if (o.model == "gpt" && !given(o, "--warmup-iters"))
    o.gpt.warmup_iters = std::min(o.gpt.warmup_iters, o.gpt.max_iters - 1);
  if (o.model == "gpt") check_gpt(o);
  // --predict rehearses the run on the meta device (tools/plan/rehearsal.h), which runs neither
  // autocast nor a router: refused here, before the corpus loads, as plan refuses them.
  TD_CHECK_VALUE(!o.predict || o.amp == "none", "train: --predict with --amp ", o.amp,
                 ": autocast does not run on the meta device yet, so the prediction would be "
                 "float32's; drop one of them");
  TD_CHECK_VALUE(!o.predict || o.gpt.n_experts == 0,
                 "train: --predict with --n-experts: a mixture of experts routes tokens by their "
                 "values, which a rehearsal on the meta device does not have");
  TD_CHECK_VALUE(
      !o.predict || (o.data_parallel.empty() && o.pipeline.empty()),
      "train: --predict plans the ranks of --ddp, --tp, --pp or --cp, not --data-parallel "
      "or --pipeline (one process over several devices)");
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
  TD_CHECK_VALUE(o.tp >= 1 && o.pp >= 1 && o.cp >= 1 && o.dp >= 0,
                 "train: --tp, --pp and --cp must be >= 1 and --dp >= 0, but got --tp ", o.tp,
                 " --pp ", o.pp, " --cp ", o.cp, " --dp ", o.dp);
  TD_CHECK_VALUE((o.tp > 1 || !o.sequence_parallel) &&
                     (o.tp > 1 || o.pp > 1 || o.cp > 1 || o.ep > 1 || o.dp == 0),
                 "train: --dp and --sequence-parallel describe a --tp run (tensor parallel size "
                 "> 1; --dp a --pp, --cp or --ep run too); for data parallelism alone use --ddp");
  check_context_parallel(o), check_experts(o);  // moe_setup.cpp: the MoE flags
  if (o.cp > 1 || o.ep > 1)
    o.ddp = true;  // a context-parallel run is a multi-process run, as --ddp's
  // The flag that made this a run of ranks, for the errors below (--tp and --pp imply --ddp).
  const std::string ranks_flag = o.pp > 1   ? str("--pp ", o.pp)
                                 : o.tp > 1 ? str("--tp ", o.tp)
                                 : o.cp > 1 ? str("--cp ", o.cp)
                                 : o.ep > 1 ? str("--ep ", o.ep)
                                            : std::string("--ddp");
  if (o.pp > 1) {
    TD_CHECK_VALUE(o.model == "gpt", "train: --pp ", o.pp, " needs --model gpt (", o.model,
                   " runs its pipelines in one process: --pipeline DEVICES)");
    TD_CHECK_VALUE(o.pipeline.empty(),
                   "train: --pp (a stage per rank) and --pipeline (stages on one process's "
                   "devices) are two pipelines; choose one");
    o.ddp = true;  // a pipeline of ranks is a multi-process run, as --ddp's
  }
  if (o.tp > 1) {
    TD_CHECK_VALUE(o.model != "cnn-bn", "train: --tp ", o.tp,
                   " with --model cnn-bn: its BatchNorm1d normalises each of fc1's features, "
                   "which the column cut splits over the ranks, and the plan does not cut batch "
                   "norm; use --model mlp, cnn or gpt");
    o.ddp = true;  // a tensor-parallel run is a multi-process run, as --ddp's
  }
  TD_CHECK_VALUE(o.ddp_hook.empty() || o.ddp, "train: --ddp-hook ", o.ddp_hook,
                 " needs --ddp (it says what DDP's buckets send)");
  if (!o.ddp_hook.empty()) parallel::comm_hook_named(o.ddp_hook);  // a bad name fails here
  TD_CHECK_VALUE(o.zero >= 0 && o.zero <= 3, "train: --zero must be 0, 1, 2 or 3, but got ",
                 o.zero);
  TD_CHECK_VALUE(o.zero == 0 || o.ddp, "train: --zero ", o.zero,
                 " needs --ddp (it shards what DDP's ranks keep)");
  TD_CHECK_VALUE(o.zero == 0 || o.ddp_hook.empty(), "train: --zero ", o.zero,
                 " reduces gradients with a reduce-scatter; --ddp-hook ", o.ddp_hook,
                 " replaces an all-reduce: choose one");
  TD_CHECK_VALUE(!o.sharded_checkpoint || (o.ddp && !o.checkpoint.empty()),
                 "train: --sharded-checkpoint saves each rank's part of a run of ranks (--ddp, "
                 "--tp or --pp, any layout) to --checkpoint DIR; give both, or leave it out for "
                 "one whole file");
  if (!o.data_parallel.empty()) {
    TD_CHECK_VALUE(!o.ddp, "train: --data-parallel and ", ranks_flag,
                   " are two ways of using several devices; choose one (", ranks_flag,
                   ": one process per device under `tandem launch` or mpirun)");
    use_first_device(o, "--data-parallel", o.data_parallel,
                     device_list("--data-parallel", o.data_parallel), "holds the model");
  }
  if (o.cuda_graphs) {
    // A replay repeats the captured step exactly: what changes between steps on the host cannot
    // be in it (train/graphed_step.h).
    TD_CHECK_VALUE(o.model != "gpt" && o.model != "cnn-bn",
                   "train: --cuda-graphs needs --model mlp or cnn: ", o.model,
                   "'s dropout draws a new mask every step, which a replayed graph cannot");
    TD_CHECK_VALUE(o.schedule == "none", "train: --cuda-graphs needs --schedule none: the ",
                   o.schedule, " schedule changes the learning rate every step, and the graph ",
                   "holds the one it was captured with");
    TD_CHECK_VALUE(o.amp != "fp16" || o.optimizer != "sgd",
                   "train: --cuda-graphs --amp fp16 needs --optimizer adam or adamw: the gradient "
                   "scaler skips a step with inf/NaN gradients on the GPU only for Adam; SGD's "
                   "would read the flag on the host, which a graph cannot");
    TD_CHECK_VALUE(!o.ddp && o.data_parallel.empty() && o.pipeline.empty() &&
                       !o.activation_checkpointing && !o.skip_nonfinite,
                   "train: --cuda-graphs captures one device's plain step: not with --ddp, "
                   "--data-parallel, --pipeline, --activation-checkpointing or --skip-nonfinite");
  }
  TD_CHECK_VALUE(one_of(o.amp, {"none", "bf16", "fp16"}), "train: --amp ", o.amp,
                 " is not one of none, bf16, fp16");
  TD_CHECK_VALUE(o.chunks >= 1, "train: --chunks must be >= 1, but got ", o.chunks);
  TD_CHECK_VALUE(
      one_of(o.pipeline_schedule, {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "dualpipev"}),
      "train: --pipeline-schedule ", o.pipeline_schedule,
      " is not one of gpipe, 1f1b, interleaved, zb-h1, zb-v, dualpipev");
  TD_CHECK_VALUE(!given(o, "--virtual-stages") || o.pipeline_schedule == "interleaved",
                 "train: --virtual-stages is the interleaved schedule's (zb-v and dualpipev hold "
                 "two stages per rank by design; gpipe, 1f1b and zb-h1 one)");
  if (!o.pipeline.empty()) {
    TD_CHECK_VALUE(!o.ddp && o.data_parallel.empty(), "train: --pipeline cannot be combined with ",
                   o.ddp ? ranks_flag : std::string("--data-parallel"),
                   "; choose one way of using several devices");
    TD_CHECK_VALUE(o.model != "cnn-bn",
                   "train: --pipeline needs --model mlp, cnn or gpt: cnn-bn's batch norm would "
                   "normalise each micro-batch on its own, which trains a different model");
    TD_CHECK_VALUE(o.batch_size >= o.chunks, "train: --chunks ", o.chunks,
                   " is more than --batch-size ", o.batch_size,
                   "; every micro-batch needs at least one image");
    use_first_device(o, "--pipeline", o.pipeline, device_list("--pipeline", o.pipeline),
                     "takes the batches");
  }
  // Restarted by `tandem launch --max-restarts` (TANDEM_RESTART_COUNT > 0): go on from the
  // checkpoint the failed attempt left, if it saved one.
  const char* restart = std::getenv("TANDEM_RESTART_COUNT");
  if (!o.resume && !o.checkpoint.empty() && restart != nullptr && std::atoi(restart) > 0 &&
      holds_checkpoint(o.checkpoint)) {
    std::printf("restart %s: resuming from the checkpoint in %s\n", restart, o.checkpoint.c_str());
    o.resume = true;
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

}  // namespace tandem::tools
