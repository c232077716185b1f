// bench/amp_step_bench.cpp — a whole training step (forward, loss, backward, optimizer) in
// float32 against the same step under autocast (issue 16's CPU bars), on 1 and 2 threads, in one
// run. Models are the train-step bench's: the reference MLP (784-512-256-10) at batch 256 with
// SGD-momentum, and the reference CNN at batch 64 with Adam; plus the MLP at batch 1024, where
// the matrix products dominate. The rounds alternate float32 and autocast, so a change in the
// machine's speed hits both; each cell is the median.
//   build-bench/bench/amp_step_bench [--rounds N] [--quick]
#include <tandem/core/kernels/kernels.h>
#include <tandem/tandem.h>
#include <optional>

#include "bench_util.h"
#include "reference_models.h"

using namespace tandem;

namespace {

struct Case {
  const char* name;
  bool cnn;
  int64_t batch;
};

// One training step of `c`'s model; `amp` float32 means no autocast.
struct Step {
  bench::ReferenceMlp mlp;
  bench::ReferenceCnn cnn;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;
  Case c;

  explicit Step(Case cs) : c(cs) {
    manual_seed(0);
    x = c.cnn ? randn({c.batch, 1, 28, 28}) : randn({c.batch, 784});
    y = (rand({c.batch}) * 10.0).to(kInt64);
    if (c.cnn) {
      opt = std::make_unique<optim::Adam>(cnn.parameters(), optim::AdamOptions{.lr = 1e-3});
    } else {
      opt = std::make_unique<optim::SGD>(mlp.parameters(),
                                         optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    }
  }
  void run(DType amp) {
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (amp != kFloat32) autocast.emplace(DeviceType::CPU, amp);
      loss = cross_entropy(c.cnn ? cnn.forward(x) : mlp.forward(x), y);
    }
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 7);
  bench::report_load();
  std::printf("bfloat16 matmul: %s\n\n", cpu_gemm_path(kBFloat16).c_str());
  std::printf("%-16s %8s %12s %14s %10s\n", "model", "threads", "float32 ms", "autocast bf16",
              "speed-up");
  const Case cases[] = {
      {"mlp batch 256", false, 256}, {"mlp batch 1024", false, 1024}, {"cnn batch 64", true, 64}};
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Step step(c);
      std::vector<double> f32, bf16;
      for (int w = 0; w < 2; ++w) step.run(kFloat32), step.run(kBFloat16);  // warm-up
      for (int r = 0; r < args.rounds; ++r) {
        f32.push_back(bench::time_per_call([&] { step.run(kFloat32); }, 1) * 1e3);
        bf16.push_back(bench::time_per_call([&] { step.run(kBFloat16); }, 1) * 1e3);
      }
      const double a = bench::median(f32), b = bench::median(bf16);
      std::printf("%-16s %8d %12.2f %14.2f %9.2fx\n", c.name, threads, a, b, a / b);
    }
  }
  std::printf("bar (issue 16): the MLP step under autocast at least 1.5x float32; CNN reported\n");
  return 0;
}
