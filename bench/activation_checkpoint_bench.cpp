// bench/activation_checkpoint_bench.cpp — what activation checkpointing trades, in one run: 32
// Linear(1024, 1024) + ReLU layers, batch 256, float32, one SGD step on a device of its own
// (cpu:5, so the statistics count only this model), without checkpointing and with
// checkpoint_sequential over 2, 4, 6, 8 and 16 segments.
//
// Memory, from the device's statistics (MiB):
//   held after forward: what the graph keeps for backward when the forward ends (the saved
//     activations; with checkpointing the segments' inputs and the last segment's activations);
//   step peak: the highest point of the whole step above its start, where the start holds the
//     parameters and their gradients (kept allocated, zeroed, between steps): the activations
//     plus backward's short-lived gradient buffers (one layer's dW and dy at a time).
// Time: the median of single steps, interleaved round by round with the plain step.
//   build-bench/bench/activation_checkpoint_bench [--rounds N] [--quick]
#include <tandem/tandem.h>

#include "bench_util.h"

using namespace tandem;

namespace {

constexpr int kLayers = 32;
constexpr int64_t kWidth = 1024, kBatch = 256;
const Device kDevice = Device::cpu(5);

double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

struct Result {
  double held_mib = 0, peak_mib = 0;
  std::vector<double> ms;
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 5);
  bench::report_load();
  manual_seed(0);
  nn::Sequential model;
  for (int i = 0; i < kLayers; ++i) {
    model.push_back(nn::Linear(kWidth, kWidth));
    model.push_back(nn::ReLU());
  }
  model.to(kDevice);
  const Tensor x = randn({kBatch, kWidth}).to(kDevice);
  {
    NoGradGuard no_grad;  // gradients allocated once, as zero_grad(set_to_none = false) keeps them
    for (Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
  }
  optim::SGD opt(model.parameters(), {.lr = 1e-4});

  const std::vector<int> modes{0, 2, 4, 6, 8, 16};  // 0: no checkpointing
  std::vector<Result> results(modes.size());
  auto step = [&](int segments, Result* r) {
    {
      NoGradGuard no_grad;
      for (Tensor& p : model.parameters()) p.grad().zero_();
    }
    const int64_t start = memory_stats(kDevice).allocated_bytes;
    reset_peak_memory_stats(kDevice);
    const Tensor out = segments > 0 ? nn::checkpoint_sequential(model, segments, x) : model(x);
    const Tensor loss = (out * out).mean();
    if (r) r->held_mib = mib(memory_stats(kDevice).allocated_bytes - start);
    loss.backward();
    if (r) r->peak_mib = mib(memory_stats(kDevice).peak_allocated_bytes - start);
    opt.step();
  };
  for (size_t m = 0; m < modes.size(); ++m) step(modes[m], &results[m]);  // warm-up + memory
  const int steps = args.quick ? 2 : 5;
  for (int round = 0; round < args.rounds; ++round)
    for (size_t m = 0; m < modes.size(); ++m)
      for (int s = 0; s < steps; ++s)
        results[m].ms.push_back(bench::time_per_call([&] { step(modes[m], nullptr); }, 1) * 1e3);

  std::printf("%d x (Linear(%ld, %ld) + ReLU), batch %ld, float32, SGD step on %s; %d threads\n",
              kLayers, long(kWidth), long(kWidth), long(kBatch), kDevice.str().c_str(),
              get_num_threads());
  std::printf("%-10s %14s %8s %10s %8s %10s %10s\n", "segments", "held after fwd", "reduction",
              "step peak", "reduction", "ms / step", "time ratio");
  const double plain_peak = results[0].peak_mib, plain_ms = bench::median(results[0].ms);
  for (size_t m = 0; m < modes.size(); ++m) {
    const Result& r = results[m];
    const double ms = bench::median(r.ms);
    std::printf("%-10s %10.1f MiB %8.2fx %6.1f MiB %8.2fx %10.1f %9.2fx\n",
                modes[m] == 0 ? "none" : std::to_string(modes[m]).c_str(), r.held_mib,
                results[0].held_mib / r.held_mib, r.peak_mib, plain_peak / r.peak_mib, ms,
                ms / plain_ms);
  }
  std::printf(
      "held after fwd: the activations the graph holds for backward; their peak over the step is "
      "there\n  (a recompute holds the inputs of the segments before it and one segment's "
      "activations, no more).\nstep peak: adds backward's short-lived gradient buffers, one "
      "layer's at a time (%.1f MiB without checkpointing).\nbars (segments = 6): activations at "
      "least 4x fewer (plain / this, held after fwd: %.2fx); time at most 1.35x (%.2fx)\n",
      plain_peak - results[0].held_mib, results[0].held_mib / results[3].held_mib,
      bench::median(results[3].ms) / plain_ms);
  return 0;
}
