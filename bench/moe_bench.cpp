// bench/moe_bench.cpp — load imbalance under expert parallelism: one MoE layer (8 experts, top-2,
// C = 256, experts 4C wide) trained forward + backward over ep = 2 shared-memory processes, one
// thread each, 2,048 tokens per rank. Balanced: a router of small random weights (each expert
// near its share). Skewed: a router that puts expert 0 first for every token, so expert 0 takes
// N of the N·k = 2N choices, 4× the mean N·k/E, and its rank does most of the experts' work.
// Each rank's step time is timed; the slowest rank's is the step's (the others
// wait for it at the all-to-all). The same with capacity 1.25, which caps expert 0 at 1.25× its
// share and drops the rest.
//   build/bench/moe_bench [--rounds N]
#include <tandem/parallel/ep/plan.h>
#include <tandem/tandem.h>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>

#include "bench_util.h"
#include "two_processes.h"

using namespace tandem;
using namespace tandem::parallel;

namespace {

constexpr int64_t kC = 256, kTokens = 2048, kExperts = 8;

// The layer of `capacity`; skewed: input feature 0 is 1 for every token and expert 0's router
// weight on it is large, so every token ranks expert 0 first.
nn::MoE layer(std::optional<double> capacity, bool skewed) {
  manual_seed(3);
  nn::MoE m(
      {.n_embd = kC, .moe = {.n_experts = kExperts, .top_k = 2, .capacity_factor = capacity}});
  NoGradGuard no_grad;
  if (skewed) m.router.weight.select(1, 0).select(0, 0).fill_(50.0);
  return m;
}

Tensor tokens(int rank) {
  manual_seed(uint64_t(10 + rank));
  Tensor x = randn({kTokens, kC});
  NoGradGuard no_grad;
  x.select(1, 0).fill_(1.0);
  return x;
}

// One case over 2 processes: each rank's median step ms, and expert 0's share of the choices.
void run_case(int rounds, std::optional<double> capacity, bool skewed, const std::string& name) {
  bench::in_two_processes([&](Communicator& g, std::ofstream& o) {
    const std::shared_ptr<Communicator> group(&g, [](Communicator*) {});
    nn::Sequential whole;
    whole.push_back("moe", nn::AnyModule(layer(capacity, skewed)));
    nn::Sequential model = ep::expert_parallel(whole, group);
    auto& moe = model.at<nn::MoE>("moe");
    Tensor x = tokens(g.rank());
    x.requires_grad_();
    auto step = [&] {
      const Tensor y = model(x);
      (sum(y * y) + moe.aux_loss).backward();
    };
    Tensor mine = full({1}, bench::median_call_ms(2, rounds, step), {.dtype = kFloat64});
    std::vector<Tensor> ms;
    for (int r = 0; r < g.size(); ++r) ms.push_back(empty({1}, {.dtype = kFloat64}));
    g.all_gather(ms, mine)->wait();
    if (g.rank() != 0) return;
    int64_t total = 0;
    for (int64_t c : moe.tokens_per_expert) total += c;
    o << str(name, ": step ms per rank ", ms[0].item(), " ", ms[1].item(), "; expert 0 has ",
             double(moe.tokens_per_expert[0]) * double(kExperts) / double(total),
             "x the mean of the choices; dropped ", moe.dropped, " of ", total, "\n");
  });
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 9);
  bench::report_load();
  run_case(args.rounds, std::nullopt, false, "balanced, dropless");
  run_case(args.rounds, std::nullopt, true, "skewed, dropless");
  run_case(args.rounds, 1.25, false, "balanced, capacity 1.25");
  run_case(args.rounds, 1.25, true, "skewed, capacity 1.25");
  return 0;
}
