// bench/ddp_bench.cpp — what DDP's design buys, measured on this machine with 2 ranks:
//  1. overlap: a synthetic MLP with 64 MiB of parameters (4 × Linear 2048→2048), batch 32 per
//     rank, SGD step. Bucketed DDP (25 MiB buckets, 1 MiB first: all-reduces start during
//     backward) against the same DDP with one bucket (a single all-reduce after backward), and
//     one rank alone (no communication at all). Interleaved rounds, medians.
//  2. cnn: images/s of the MNIST reference CNN (Adam, global batch 64): 1 rank with both cores
//     against 2 ranks with one core each (32 images per rank per step), over Gloo, shared
//     memory, shared memory with every all-reduce on its worker thread (none inline), shared
//     memory with gradient_as_bucket_view, and 2 ranks that never synchronise (no DDP: the
//     bound, what splitting the batch alone gives); the variants take turns, a round each per
//     pass, and the ratios are taken within passes.
//   build-bench/bench/ddp_bench [--rounds N] [--quick]
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/tandem.h>
#include <fstream>
#include <map>

#include "bench_util.h"
#include "reference_models.h"

using namespace tandem;

namespace {

// Median seconds per step of `steps` steps, per round.
template <typename Step>
double median_step(Step&& step, int steps) {
  step();  // warm-up: page faults, buckets, Gloo buffers
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) t.push_back(bench::time_per_call(step, 1));
  return bench::median(t);
}

// One rank's part of the overlap measurement; rank 0 appends "overlap world bucketed single" to
// `out` (a file, or /dev/stdout under tandem launch).
void overlap_rank(int rank, int world, int rounds, int steps, const std::string& out) {
  bench::Wide a, b;
  std::unique_ptr<parallel::DistributedDataParallel<bench::Wide>> bucketed, single;
  if (world > 1) {
    const char* cap = std::getenv("DDP_BENCH_CAP_MB");  // for trying other bucket sizes
    const double mb = cap ? std::atof(cap) : 25;
    bucketed = std::make_unique<parallel::DistributedDataParallel<bench::Wide>>(
        a, parallel::DDPOptions{.bucket_cap_mb = mb, .first_bucket_mb = std::min(mb, 1.0)});
    single = std::make_unique<parallel::DistributedDataParallel<bench::Wide>>(
        b, parallel::DDPOptions{.bucket_cap_mb = 1e6, .first_bucket_mb = 1e6});
  }
  optim::SGD opt_a(a.parameters(), {.lr = 1e-3}), opt_b(b.parameters(), {.lr = 1e-3});
  const char* batch = std::getenv("DDP_BENCH_BATCH");  // rows per rank (default 32)
  const Tensor x = randn({batch ? std::atoll(batch) : 32, 2048});
  auto step = [&](bench::Wide& m, optim::SGD& opt) {
    opt.zero_grad();
    const Tensor o = m.forward(x);
    (o * o).mean().backward();  // DDP's hooks sync during backward
    opt.step();
  };
  std::vector<double> ta, tb;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(median_step([&] { step(a, opt_a); }, steps));
    if (world > 1) tb.push_back(median_step([&] { step(b, opt_b); }, steps));
  }
  if (rank == 0)
    std::ofstream(out, std::ios::app) << "overlap " << world << " " << bench::median(ta) << " "
                                      << (tb.empty() ? 0.0 : bench::median(tb)) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  // Under `tandem launch` (bench/ddp_overlap_netns.sh): one rank of the overlap measurement.
  if (argc > 1 && std::string(argv[1]) == "--worker") {
    auto group = parallel::init_process_group({.timeout = std::chrono::seconds(300)});
    overlap_rank(group->rank(), group->size(), 5, 8, "/dev/stdout");
    parallel::destroy_process_group();
    return 0;
  }
  const bench::Args args = bench::parse_args(argc, argv, 5);
  bench::report_load();
  const std::string out = "/tmp/tandem-ddp-bench-" + std::to_string(::getpid()) + ".txt";
  const int steps = args.quick ? 3 : 8;

  // ---- 1. overlap (over the default transport, or DDP_BENCH_BACKEND: gloo, shm)
  const char* backend = std::getenv("DDP_BENCH_BACKEND");
  for (int world : {1, 2})
    parallel::spawn(
        [&](int rank) {
          parallel::init_process_group(
              {.backend = backend ? backend : "", .timeout = std::chrono::seconds(300)});
          overlap_rank(rank, world, args.rounds, steps, out);
          parallel::destroy_process_group();
        },
        world);
  // ---- 2. cnn throughput: 1 rank, then 2 ranks over each CPU transport. One round of each in
  // turn, per pass (the order reversed every other pass): each 2-rank/1-rank ratio is taken
  // within its pass, seconds apart, so a change in the machine's speed between passes (on the
  // 2-vCPU VMs, 0.7-1.0 in single runs of the same build) does not become the ratio.
  const std::vector<std::string> variants{"1-rank",     "gloo",     "shm",
                                          "shm-queued", "shm-view", "no-sync"};
  for (int pass = 0; pass < args.rounds; ++pass)
    for (size_t v = 0; v < variants.size(); ++v) {
      const std::string& variant = variants[pass % 2 == 0 ? v : variants.size() - 1 - v];
      const int world = variant == "1-rank" ? 1 : 2;
      parallel::spawn(
          [&](int rank) {
            using namespace std::chrono_literals;
            const bool shm = variant == "shm" || variant == "shm-view" || variant == "no-sync";
            auto group =
                parallel::init_process_group({.backend = shm ? "shm" : "gloo", .timeout = 300s});
            if (variant == "shm-queued")  // every all-reduce on the worker thread, none inline
              group = std::make_shared<parallel::ShmCommunicator>(
                  std::make_shared<parallel::PrefixStore>("queued", parallel::default_store()),
                  rank, world, parallel::ShmOptions{.timeout = 300s, .inline_when_idle = false});
            bench::ReferenceCnn model;
            std::unique_ptr<parallel::DistributedDataParallel<bench::ReferenceCnn>> ddp;
            if (world == 2 && variant != "no-sync")  // no-sync: each rank trains alone
              ddp = std::make_unique<parallel::DistributedDataParallel<bench::ReferenceCnn>>(
                  model, parallel::DDPOptions{.group = group,
                                              .gradient_as_bucket_view = variant == "shm-view"});
            optim::Adam opt(model.parameters(), {.lr = 1e-3});
            const int64_t batch = 64 / world;
            const Tensor x = randn({batch, 1, 28, 28});
            const Tensor y = zeros({batch}, {.dtype = kInt64});
            auto step = [&] {
              opt.zero_grad();
              cross_entropy(model.forward(x), y).backward();
              opt.step();
            };
            const double t = median_step(step, steps * 3);
            if (rank == 0)
              std::ofstream(out, std::ios::app) << "cnn " << variant << " " << t << "\n";
            ddp.reset();
            group.reset();
            parallel::destroy_process_group();
          },
          world);
    }

  std::ifstream in(out);
  std::string kind;
  double single_rank = 0;
  std::map<std::string, std::vector<double>> cnn;  // variant -> seconds per step, per pass
  std::printf("1. MLP with 64 MiB of parameters, batch 32 per rank, step time (median)\n");
  while (in >> kind) {
    if (kind == "overlap") {
      int world;
      double a, b;
      in >> world >> a >> b;
      if (world == 1) {
        single_rank = a;
        std::printf("  1 rank, no communication:                 %8.1f ms\n", a * 1e3);
      } else {
        std::printf("  2 ranks, bucketed DDP (overlapped):       %8.1f ms\n", a * 1e3);
        std::printf("  2 ranks, one all-reduce after backward:   %8.1f ms\n", b * 1e3);
        std::printf(
            "  overlap saves %.1f %% of the step (bucketed / single = %.3f); "
            "communication adds %.1f ms over 1 rank\n",
            100 * (1 - a / b), a / b, (a - single_rank) * 1e3);
      }
    } else {
      std::string variant;
      double t;
      in >> variant >> t;
      cnn[variant].push_back(t);
    }
  }
  const std::vector<double>& one = cnn["1-rank"];
  std::printf("2. reference CNN, global batch 64, Adam (medians of %zu passes)\n", one.size());
  std::printf("  1 rank (2 threads):  %7.0f img/s\n", 64 / bench::median(one));
  for (const std::string& variant : variants) {
    if (variant == "1-rank") continue;
    std::vector<double> ratio;  // 2 ranks / 1 rank in images/s, within each pass
    for (size_t p = 0; p < one.size(); ++p) ratio.push_back(one[p] / cnn[variant][p]);
    std::printf("  2 ranks (1 thread), %-10s: %7.0f img/s  (2 ranks / 1 rank = %.2f [%.2f-%.2f])\n",
                variant.c_str(), 64 / bench::median(cnn[variant]), bench::median(ratio),
                *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()));
  }
  // What synchronising costs, apart from what splitting the batch costs: each DDP variant's
  // images/s over the unsynchronised ranks', within passes.
  const std::vector<double>& bound = cnn["no-sync"];
  std::printf("  (shm-view: gradient_as_bucket_view; no-sync: no DDP, the bound)\n");
  for (const char* variant : {"shm", "shm-view"}) {
    std::vector<double> ratio;
    for (size_t p = 0; p < bound.size(); ++p) ratio.push_back(bound[p] / cnn[variant][p]);
    std::printf("  %s / no-sync = %.3f: synchronising costs %.1f %% of the images/s\n", variant,
                bench::median(ratio), 100 * (1 - bench::median(ratio)));
  }
  std::remove(out.c_str());
  return 0;
}
