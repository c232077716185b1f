// bench/backward_branches_bench.cpp — backward on two devices when the nodes are small. Two
// independent branches of 48 layers each (a 32×128 by 128×128 matmul, then tanh; float32), one
// branch on cpu:0 and one on cpu:1, summed at the end; against the same graph with both branches
// on cpu:0. Every node takes a few microseconds, so what this measures is the engine's cost per
// node on each device thread and how well the two threads share the cores (hand-offs, locks, the
// intra-op pool), not the products' speed. Only backward is timed, interleaved round by round.
// Prints the median milliseconds and the speedup one-device/two-devices (the bar: >= 1.5 on 2
// cores; before the device workers were reworked it was 0.64-0.89).
//   ./build-bench/bench/backward_branches_bench [--rounds N] [--quick]
#include <tandem/tandem.h>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_util.h"

using namespace tandem;

namespace {

constexpr int64_t kRows = 32, kWidth = 128;

struct Branch {
  std::vector<Tensor> weights;
  Tensor x;
  Branch(int depth, Device d) {
    for (int i = 0; i < depth; ++i)
      weights.push_back((randn({kWidth, kWidth}) * 0.1).to(d).requires_grad_());
    x = randn({kRows, kWidth}).to(d);
  }
  Tensor forward() const {
    Tensor h = x;
    for (const Tensor& w : weights) h = tanh(h.matmul(w));
    return h.sum();
  }
  void zero_grad() const {
    for (const Tensor& w : weights) w.set_grad(Tensor());
  }
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 15);
  const int depth = 48, reps = args.quick ? 5 : 20;  // backward passes per round
  bench::report_load();
  std::printf(
      "two branches of %d x (matmul [%ld, %ld]·[%ld, %ld], tanh) float32, %d intra-op threads; "
      "%d backward passes per round\n",
      depth, long(kRows), long(kWidth), long(kWidth), long(kWidth), get_num_threads(), reps);
  manual_seed(0);
  const Branch a0(depth, Device::cpu(0)), b0(depth, Device::cpu(0));  // one device
  const Branch a1(depth, Device::cpu(0)), b1(depth, Device::cpu(1));  // two devices

  auto backward_ms = [&](const Branch& a, const Branch& b) {
    double total = 0;
    for (int r = 0; r < reps; ++r) {
      const Tensor loss = a.forward() + b.forward().to(Device::cpu());
      const double t0 = bench::now_s();
      loss.backward();
      total += bench::now_s() - t0;
      a.zero_grad();
      b.zero_grad();
    }
    return total * 1e3 / reps;
  };
  for (int w = 0; w < 3; ++w) {  // warm-up: page faults, worker threads, the pool
    backward_ms(a0, b0);
    backward_ms(a1, b1);
  }
  std::vector<double> one, two;
  for (int r = 0; r < args.rounds; ++r) {
    one.push_back(backward_ms(a0, b0));
    two.push_back(backward_ms(a1, b1));
  }
  const double o = bench::median(one), t = bench::median(two);
  std::printf("backward ms (median of %d rounds): one device %.3f  two devices %.3f\n", args.rounds,
              o, t);
  std::vector<double> ratios;  // round by round: the VM's drift hits both sides of a round alike
  for (size_t r = 0; r < one.size(); ++r) ratios.push_back(one[r] / two[r]);
  std::sort(ratios.begin(), ratios.end());
  std::printf("speedup one/two = %.2f (per round: min %.2f, median %.2f, max %.2f)\n", o / t,
              ratios.front(), bench::median(ratios), ratios.back());
  return 0;
}
