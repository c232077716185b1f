// tools/main.cpp — the `tandem` command: parses arguments (CLI11) and dispatches to a subcommand.
//   tandem demo [--steps N] [--batch N] [--lr X] [--seed N]
#include <tandem/core/error.h>
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem — a deep-learning framework whose parallelism is easy to read"};
  app.require_subcommand(1);

  tandem::tools::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo",
      "train a 2-layer MLP on synthetic data with plain gradient descent (end-to-end check)");
  demo_cmd->add_option("--steps", demo.steps, "gradient steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo_cmd->add_option("--batch", demo.batch, "examples in the synthetic set")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  demo_cmd->add_option("--lr", demo.lr, "learning rate")->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "random seed")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo_cmd) return tandem::tools::run_demo(demo);
  } catch (const tandem::Error& e) {
    std::cerr << "tandem: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
