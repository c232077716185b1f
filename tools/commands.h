// tools/commands.h — the subcommands of `tandem`, each in its own file.
#pragma once

#include <cstdint>

namespace tandem::tools {

struct DemoOptions {
  int steps = 300;
  int64_t batch = 256;
  double lr = 0.5;
  uint64_t seed = 0;
};

/// Trains a 2-layer MLP on a synthetic classification problem and prints the loss curve.
int run_demo(const DemoOptions& options);

}  // namespace tandem::tools
