// bench/cnn_layers_bench.cpp — where the reference CNN's training step spends its time: each layer
// of it (batch 64), forward alone and forward + backward, in Tandem and in LibTorch in the same
// process, as medians and ratios. train_step_bench gives the whole step; this says which layer to
// work on. The model runs ReLU and max-pool as one op in Tandem (relu_max_pool2d) and as two in
// LibTorch: rows "relu+pool" compare those, and the rows in parentheses, the two ops apart, are
// left out of the sum.
//   OPENBLAS_NUM_THREADS=1 build-bench/bench/cnn_layers_bench [--threads 2] [--reps 40]
#include <torch/torch.h>

#include <tandem/tandem.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

struct Layer {
  std::string name;
  std::vector<int64_t> in;  // input shape
  std::function<tandem::Tensor(const tandem::Tensor&)> tandem;
  std::function<torch::Tensor(const torch::Tensor&)> torch;
  bool input_grad = true;  // the first layer's input needs no gradient
  bool in_step = true;     // false: shown for comparison, not part of the model's step
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--threads") threads = std::stoi(argv[i + 1]);
    if (k == "--reps") reps = std::stoi(argv[i + 1]);
  }
  tandem::set_num_threads(threads);
  torch::set_num_threads(threads);
  bench::report_load();

  tandem::nn::Conv2d t_conv1{1, 32, 3}, t_conv2{32, 64, 3};
  tandem::nn::Linear t_fc1{1600, 128};
  torch::nn::Conv2d l_conv1{1, 32, 3}, l_conv2{32, 64, 3};
  torch::nn::Linear l_fc1{1600, 128};
  const std::vector<Layer> layers = {
      {"conv1 1->32",
       {64, 1, 28, 28},
       [&](auto& x) { return t_conv1(x); },
       [&](auto& x) { return l_conv1(x); },
       false},
      {"(relu1)",
       {64, 32, 26, 26},
       [](auto& x) { return tandem::relu(x); },
       [](auto& x) { return torch::relu(x); },
       true,
       false},
      {"(pool1)",
       {64, 32, 26, 26},
       [](auto& x) { return tandem::max_pool2d(x, {}); },
       [](auto& x) { return torch::max_pool2d(x, 2); },
       true,
       false},
      {"relu+pool1",
       {64, 32, 26, 26},
       [](auto& x) { return tandem::relu_max_pool2d(x, {}); },
       [](auto& x) { return torch::max_pool2d(torch::relu(x), 2); }},
      {"conv2 32->64",
       {64, 32, 13, 13},
       [&](auto& x) { return t_conv2(x); },
       [&](auto& x) { return l_conv2(x); }},
      {"(relu2)",
       {64, 64, 11, 11},
       [](auto& x) { return tandem::relu(x); },
       [](auto& x) { return torch::relu(x); },
       true,
       false},
      {"(pool2)",
       {64, 64, 11, 11},
       [](auto& x) { return tandem::max_pool2d(x, {}); },
       [](auto& x) { return torch::max_pool2d(x, 2); },
       true,
       false},
      {"relu+pool2",
       {64, 64, 11, 11},
       [](auto& x) { return tandem::relu_max_pool2d(x, {}); },
       [](auto& x) { return torch::max_pool2d(torch::relu(x), 2); }},
      {"fc1 1600->128",
       {64, 1600},
       [&](auto& x) { return t_fc1(x); },
       [&](auto& x) { return l_fc1(x); }},
  };

  std::printf("threads=%d; ms per call (median of %d)\n", threads, reps);
  std::printf("%-14s %9s %9s %7s   %9s %9s %7s\n", "layer", "fwd", "torch", "ratio", "fwd+bwd",
              "torch", "ratio");
  double sums[4] = {0, 0, 0, 0};
  for (const Layer& l : layers) {
    tandem::Tensor tx = tandem::randn(l.in);
    torch::Tensor lx = torch::randn(l.in);
    if (l.input_grad) {
      tx.requires_grad_();
      lx.requires_grad_();
    }
    const tandem::Tensor tg = tandem::randn(l.tandem(tx).shape());
    const torch::Tensor lg = torch::randn(l.torch(lx).sizes());
    const double tf = bench::median_call_ms(3, reps, [&] {
      tandem::NoGradGuard ng;
      (void)l.tandem(tx);
    });
    const double lf = bench::median_call_ms(3, reps, [&] {
      torch::NoGradGuard ng;
      (void)l.torch(lx);
    });
    const double tb = bench::median_call_ms(3, reps, [&] { l.tandem(tx).backward(tg); });
    const double lb = bench::median_call_ms(3, reps, [&] { l.torch(lx).backward(lg); });
    std::printf("%-14s %9.3f %9.3f %7.2f   %9.3f %9.3f %7.2f\n", l.name.c_str(), tf, lf, tf / lf,
                tb, lb, tb / lb);
    if (l.in_step) sums[0] += tf, sums[1] += lf, sums[2] += tb, sums[3] += lb;
  }
  std::printf("%-14s %9.3f %9.3f %7.2f   %9.3f %9.3f %7.2f\n", "sum", sums[0], sums[1],
              sums[0] / sums[1], sums[2], sums[3], sums[2] / sums[3]);
  return 0;
}
