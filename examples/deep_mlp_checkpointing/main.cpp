// examples/deep_mlp_checkpointing — activation checkpointing on a deep MLP: the same few training
// steps with no checkpointing and with checkpoint_sequential over 2, 4 and 8 segments, and for
// each the memory the step needs beyond the parameters, gradients and momenta, the time per step,
// and the final loss (the same bits every time: checkpointing changes where activations come from,
// not what they are). The model runs on cpu:1, a device of its own, so its statistics count only
// it.
//   build/examples/deep_mlp_checkpointing [layers] [width] [batch] [steps]
#include <tandem/tandem.h>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

using namespace tandem;

namespace {

const Device kDevice = Device::cpu(1);

double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

struct Run {
  double held_mib = 0, peak_mib = 0, ms = 0, loss = 0;
};

// Trains a fresh model for 1 + `steps` SGD steps on fixed random data (the first not timed);
// segments 0: no checkpointing.
Run train(int layers, int64_t width, int64_t batch, int steps, int segments) {
  manual_seed(0);
  nn::Sequential model;
  for (int i = 0; i < layers; ++i) {
    model.push_back(nn::Linear(width, width));
    model.push_back(nn::ReLU());
    if (i == layers / 2) model.push_back(nn::Dropout(0.1));  // replayed exactly in the recompute
  }
  model.push_back(nn::Linear(width, 10));
  model.to(kDevice);
  const Tensor x = randn({batch, width}).to(kDevice);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i * 7 + i / 3) % 10;
  const Tensor y = from_vector(labels, {batch}).to(kDevice);
  optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  {
    NoGradGuard no_grad;  // gradients stay allocated between steps (zeroed, not freed)
    for (Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
  }

  Run run;
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up (first-touch page faults): not timed
    if (s == 1) t0 = std::chrono::steady_clock::now();
    {
      NoGradGuard no_grad;
      for (Tensor& p : model.parameters()) p.grad().zero_();
    }
    // The start of the step: parameters, gradients (and, after the first step, the momenta).
    const int64_t start = memory_stats(kDevice).allocated_bytes;
    reset_peak_memory_stats(kDevice);
    const Tensor logits = segments > 0 ? nn::checkpoint_sequential(model, segments, x) : model(x);
    const Tensor loss = cross_entropy(logits, y);
    const int64_t held = memory_stats(kDevice).allocated_bytes - start;
    loss.backward();
    run.held_mib = mib(held);  // what the graph keeps for backward
    // The step's peak above its start: the activations and backward's short-lived buffers.
    run.peak_mib = mib(memory_stats(kDevice).peak_allocated_bytes - start);
    opt.step();
    run.loss = loss.item();
  }
  run.ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
      steps;
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::stoi(argv[1]) : 24;
  const int64_t width = argc > 2 ? std::stoll(argv[2]) : 512;
  const int64_t batch = argc > 3 ? std::stoll(argv[3]) : 256;
  const int steps = argc > 4 ? std::stoi(argv[4]) : 5;
  std::printf("%d x (Linear(%ld, %ld) + ReLU) + Linear(%ld, 10), batch %ld, %d SGD steps on %s\n",
              layers, long(width), long(width), long(width), long(batch), steps,
              kDevice.str().c_str());
  std::printf("%-9s %15s %21s %10s  %s\n", "segments", "held after fwd", "step peak", "ms/step",
              "final loss");
  const Run plain = train(layers, width, batch, steps, 0);
  for (int segments : {0, 2, 4, 8}) {
    const Run r = segments == 0 ? plain : train(layers, width, batch, steps, segments);
    std::printf("%-9s %11.1f MiB %11.1f MiB %5.2fx %10.1f  %.9f%s\n",
                segments == 0 ? "none" : std::to_string(segments).c_str(), r.held_mib, r.peak_mib,
                plain.peak_mib / r.peak_mib, r.ms, r.loss,
                r.loss == plain.loss ? "" : "  (differs from the plain run!)");
  }
  std::printf("\nparallel::memory_summary after the last run:\n%s",
              parallel::memory_summary({kDevice}).c_str());
  return 0;
}
