// bench/zero_bench.cpp — what ZeRO costs in step time, 2 ranks (processes, the default transport:
// shared memory on this host), each with one intra-op thread. Per model, four copies trained side
// by side in each rank: DDP, ZeRO-1 and ZeRO-2 (zero_optimizer over DDP with zero_stage), and
// ZeRO-3 (fully_shard, one unit per item), all with Adam, the same data; rounds interleave the
// four, and each round's median step is kept. Printed: the median over rounds of each, and
// ZeRO / DDP.
//   gpt   the `tandem train --model gpt` default (4 layers, 4 heads, 128 wide, context 64),
//         batch 16 per rank, vocabulary 65;
//   wide  4 × Linear(2048, 2048) with ReLU between (16.8 M parameters), batch 32 per rank.
// ZeRO-1/2 replace the all-reduce by a reduce-scatter and an all-gather (the same bytes in two
// halves; over shared memory both where the tensors lie, ZeRO-1 adding the copy into its bucket
// buffers) and step 1/N of the model. ZeRO-3 (fully_shard) gathers the parameters twice (forward
// and backward: 1.5× DDP's bytes) and copies each unit's own rows into its whole tensors.
//   build/bench/zero_bench [--rounds N] [--quick]
// ZERO_BENCH_TRACE=DIR also writes ZeRO-3 traces (bench/trace_overlap.py reads them);
// ZERO_BENCH_BACKEND=gloo (or shm, mpi) picks the transport.
#include <tandem/core/trace.h>
#include <tandem/tandem.h>
#include <cstdlib>
#include <fstream>

#include "bench_util.h"

using namespace tandem;

namespace {

nn::GPTConfig gpt_config() {
  return {.block_size = 64, .vocab_size = 65, .n_layer = 4, .n_head = 4, .n_embd = 128};
}

using Forward = std::function<Tensor(const Tensor&)>;

// One rank: the four modes of model `make()` trained in turn; rank 0 appends
// "kind mode seconds" lines to `out`.
template <typename Make, typename Loss>
void rank_main(const std::string& kind, Make&& make, Loss&& loss, int rounds, int steps,
               const std::string& out) {
  set_num_threads(1);  // one core per rank
  // ZERO_BENCH_BACKEND=gloo|shm|mpi picks the transport (default: shm on one host).
  const char* backend = std::getenv("ZERO_BENCH_BACKEND");
  auto group = parallel::init_process_group(
      {.backend = backend ? backend : "", .timeout = std::chrono::seconds(300)});
  const int rank = group->rank();
  struct Mode {
    std::unique_ptr<nn::Sequential> model;
    std::unique_ptr<parallel::DistributedDataParallel<nn::Sequential>> ddp;
    std::unique_ptr<parallel::FullyShardedModule> fsdp;
    std::unique_ptr<optim::Optimizer> opt;
    std::vector<double> rounds;
  };
  std::vector<Mode> modes(4);
  const optim::AdamOptions adam{.lr = 1e-4};
  for (int stage = 0; stage < 4; ++stage) {
    Mode& m = modes[size_t(stage)];
    manual_seed(0);
    if (stage == 3) {
      m.fsdp = parallel::fully_shard(make());
      m.opt = std::make_unique<optim::Adam>(m.fsdp->parameters(), adam);
      continue;
    }
    m.model = std::make_unique<nn::Sequential>(make());
    m.ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(
        *m.model, parallel::DDPOptions{.zero_stage = stage});
    if (stage)
      m.opt = parallel::zero_optimizer<optim::Adam>(*m.ddp, m.model->parameters(), adam);
    else
      m.opt = std::make_unique<optim::Adam>(m.model->parameters(), adam);
  }
  auto step = [&](Mode& m) {
    const Forward forward = [&m](const Tensor& x) { return m.fsdp ? (*m.fsdp)(x) : (*m.ddp)(x); };
    m.opt->zero_grad();
    loss(forward).backward();
    m.opt->step();
  };
  for (int r = 0; r < rounds; ++r) {
    for (Mode& m : modes) {
      step(m);  // warm-up
      std::vector<double> t;
      for (int i = 0; i < steps; ++i) t.push_back(bench::time_per_call([&] { step(m); }, 1));
      m.rounds.push_back(bench::median(t));
    }
  }
  // ZERO_BENCH_TRACE=DIR: three more ZeRO-3 steps traced, a file per rank and model, to see the
  // all-gathers run under compute (bench/trace_overlap.py sums how much of them prefetch hid).
  if (const char* dir = std::getenv("ZERO_BENCH_TRACE")) {
    trace::set_process(rank, "rank " + std::to_string(rank));
    trace::enable();
    for (int i = 0; i < 3; ++i) step(modes[3]);
    trace::enable(false);
    trace::write_chrome_trace(std::string(dir) + "/trace-" + kind + "-rank" + std::to_string(rank) +
                              ".json");
    trace::clear();
  }
  if (rank == 0) {
    std::ofstream o(out, std::ios::app);
    for (int stage = 0; stage < 4; ++stage)
      o << kind << " " << stage << " " << bench::median(modes[size_t(stage)].rounds) << "\n";
  }
  modes.clear();
  group.reset();
  parallel::destroy_process_group();
}

nn::Sequential wide() {  // bench::Wide as a Sequential (its layers are fully_shard's units)
  return nn::Sequential{{"l1", nn::Linear(2048, 2048)}, {"r1", nn::ReLU()},
                        {"l2", nn::Linear(2048, 2048)}, {"r2", nn::ReLU()},
                        {"l3", nn::Linear(2048, 2048)}, {"r3", nn::ReLU()},
                        {"l4", nn::Linear(2048, 2048)}};
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 5);
  std::printf("zero_bench: DDP vs ZeRO-1/2/3 step time, 2 ranks x 1 thread, Adam\n");
  bench::report_cpu();
  const std::string out = "/tmp/tandem-zero-bench-" + std::to_string(::getpid()) + ".txt";
  const int steps = args.quick ? 3 : 8;
  parallel::spawn(
      [&](int) {
        std::vector<int64_t> tokens;  // a fixed sequence over the 65 ids
        for (int64_t i = 0; i < 16 * 64; ++i) tokens.push_back((i * 7 + i / 5) % 65);
        const Tensor ids = from_vector(tokens, {16, 64});
        rank_main(
            "gpt", [] { return nn::gpt(gpt_config()); },
            [&](const Forward& f) { return nn::gpt_loss(f(ids), ids); }, args.rounds, steps, out);
      },
      2);
  parallel::spawn(
      [&](int) {
        const Tensor x = randn({32, 2048});
        rank_main(
            "wide", wide,
            [&](const Forward& f) {
              const Tensor y = f(x);
              return (y * y).mean();
            },
            args.rounds, steps, out);
      },
      2);
  std::ifstream in(out);
  std::string kind;
  int stage;
  double t, ddp = 0;
  std::printf("%-6s %-7s %12s %10s\n", "model", "mode", "step (ms)", "vs DDP");
  const char* names[] = {"DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3"};
  while (in >> kind >> stage >> t) {
    if (stage == 0) ddp = t;
    std::printf("%-6s %-7s %12.2f %10.3f\n", kind.c_str(), names[stage], t * 1e3, t / ddp);
  }
  std::remove(out.c_str());
  return 0;
}
