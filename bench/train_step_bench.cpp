// bench/train_step_bench.cpp — one training step (forward, loss, backward, optimizer step) of the
// reference models, in Tandem or in LibTorch (Debian's libtorch 1.13), in one process per run so
// that thread and allocator settings apply cleanly. bench/train_step_bench.sh interleaves runs of
// both and prints the Tandem/LibTorch ratios.
//   build-bench/bench/train_step_bench --framework tandem|libtorch|cpu-info --model mlp|cnn
//   --threads N
//                                      [--steps 30] [--warmup 5]
// MLP 784-512-256-10 at batch 256 with SGD-momentum; reference CNN at batch 64 with Adam.
#include <torch/torch.h>

#include <tandem/tandem.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "reference_models.h"

namespace {

struct Args {
  std::string framework = "tandem", model = "cnn";
  int threads = 1, steps = 30, warmup = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--framework")
      a.framework = v;
    else if (k == "--model")
      a.model = v;
    else if (k == "--threads")
      a.threads = std::stoi(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--warmup")
      a.warmup = std::stoi(v);
  }
  return a;
}

// ---- Tandem
double run_tandem(const Args& a) {
  using namespace tandem;
  set_num_threads(a.threads);
  const bool cnn = a.model == "cnn";
  const int64_t batch = cnn ? 64 : 256;
  Tensor x = cnn ? randn({batch, 1, 28, 28}) : randn({batch, 784});
  Tensor y = (rand({batch}) * 10.0).to(kInt64);
  if (cnn) {
    bench::ReferenceCnn net;
    optim::Adam opt(net.parameters(), {.lr = 1e-3});
    return bench::median_call_ms(a.warmup, a.steps, [&] {
      Tensor loss = cross_entropy(net.forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    });
  }
  bench::ReferenceMlp mlp;
  optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
  return bench::median_call_ms(a.warmup, a.steps, [&] {
    Tensor loss = cross_entropy(mlp.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  });
}

// ---- LibTorch
struct LCnnImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
  torch::nn::Linear fc1{1600, 128}, fc2{128, 10};
  LCnnImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return fc2(torch::relu(fc1(h.flatten(1))));
  }
};
TORCH_MODULE(LCnn);

double run_libtorch(const Args& a) {
  torch::set_num_threads(a.threads);  // OPENBLAS_NUM_THREADS is set by the driver script
  const bool cnn = a.model == "cnn";
  const int64_t batch = cnn ? 64 : 256;
  auto x = cnn ? torch::randn({batch, 1, 28, 28}) : torch::randn({batch, 784});
  auto y = torch::randint(0, 10, {batch}, torch::kInt64);
  if (cnn) {
    LCnn net;
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
    return bench::median_call_ms(a.warmup, a.steps, [&] {
      auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    });
  }
  torch::nn::Sequential mlp(torch::nn::Linear(784, 512), torch::nn::ReLU(),
                            torch::nn::Linear(512, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 10));
  torch::optim::SGD opt(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  return bench::median_call_ms(a.warmup, a.steps, [&] {
    auto loss = torch::nn::functional::cross_entropy(mlp->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  });
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.framework == "cpu-info") {  // train_step_bench.sh's header line
    bench::report_cpu();
    return 0;
  }
  const double ms = a.framework == "libtorch" ? run_libtorch(a) : run_tandem(a);
  std::printf("%s %s threads=%d median_ms=%.3f\n", a.framework.c_str(), a.model.c_str(), a.threads,
              ms);
  return 0;
}
