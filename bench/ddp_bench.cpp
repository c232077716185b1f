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
//  3. the same CNN with its configurations alive at once in three processes, taking turns of a
//     few steps while the others sleep: 1 rank with both cores, the DDP pair over shared memory,
//     the pair without DDP. Turns are ~0.2 s apart where section 2's passes are seconds apart,
//     so the ratios see far less of the VM's changes of speed.
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

// Median seconds per step of `steps` steps, after `warm_up` untimed ones (page faults, buckets,
// Gloo buffers; and on the 2-vCPU VMs, a new process's threads can share one CPU for its first
// ~30 ms, until the scheduler spreads them: the first 4-5 steps of the 2-thread CNN run 2-3x
// slower).
template <typename Step>
double median_step(Step&& step, int steps, int warm_up = 1) {
  for (int i = 0; i < warm_up; ++i) step();
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

// One process of section 3. Rank 0 is the single rank (2 threads, batch 64); ranks 1 and 2 are
// the pair (1 thread each, batch 32), with a DDP model over shared memory and a model of their
// own without it. Turn t runs configuration t % 3 for `steps` timed steps; the others wait in
// the store, asleep. Rank 0 and rank 1 append "turn <config> <seconds per step>" to `out`.
void turns_rank(int rank, int turns, int steps, const std::string& out) {
  using namespace std::chrono_literals;
  const auto world = parallel::init_process_group({.backend = "gloo", .timeout = 300s});
  const auto store = parallel::default_store();
  const bool solo = rank == 0;
  set_num_threads(solo ? 2 : 1);
  std::shared_ptr<parallel::Communicator> pair;
  if (!solo)
    pair = std::make_shared<parallel::ShmCommunicator>(
        std::make_shared<parallel::PrefixStore>("pair", store), rank - 1, 2,
        parallel::ShmOptions{.timeout = 300s});
  bench::ReferenceCnn synced, alone;  // alone: the pair's model without DDP (the bound)
  std::unique_ptr<parallel::DistributedDataParallel<bench::ReferenceCnn>> ddp;
  if (!solo)
    ddp = std::make_unique<parallel::DistributedDataParallel<bench::ReferenceCnn>>(
        synced, parallel::DDPOptions{.group = pair});
  optim::Adam opt_synced(synced.parameters(), {.lr = 1e-3});
  optim::Adam opt_alone(alone.parameters(), {.lr = 1e-3});
  const int64_t batch = solo ? 64 : 32;
  const Tensor x = randn({batch, 1, 28, 28});
  const Tensor y = zeros({batch}, {.dtype = kInt64});
  auto step = [&](bench::ReferenceCnn& m, optim::Adam& opt) {
    opt.zero_grad();
    cross_entropy(m.forward(x), y).backward();
    opt.step();
  };
  world->barrier()->wait();  // the pair set up before the first turn, which rank 0 times
  const char* names[] = {"1-rank", "shm", "no-sync"};
  for (int t = 0; t < turns; ++t) {
    const int config = t % 3;
    const std::string key = "turn/" + std::to_string(t) + "/";
    if ((config == 0) == solo) {
      // 10 untimed steps: a process woken from a sleep can share a CPU with its peer at first.
      bench::ReferenceCnn& m = config == 2 ? alone : synced;  // rank 0's has no DDP
      optim::Adam& opt = config == 2 ? opt_alone : opt_synced;
      const double s = median_step([&] { step(m, opt); }, steps, 10);
      if (rank <= 1)
        std::ofstream(out, std::ios::app) << "turn " << names[config] << " " << s << "\n";
      store->set(key + std::to_string(rank), std::string("done"));
    }
    store->wait(config == 0 ? std::vector<std::string>{key + "0"}
                            : std::vector<std::string>{key + "1", key + "2"},
                300s);
  }
  ddp.reset();
  pair.reset();
  parallel::destroy_process_group();
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
            const double t = median_step(step, steps * 3, 10);
            if (rank == 0)
              std::ofstream(out, std::ios::app) << "cnn " << variant << " " << t << "\n";
            ddp.reset();
            group.reset();
            parallel::destroy_process_group();
          },
          world);
    }

  // ---- 3. the configurations side by side, taking turns
  const int turns = 3 * (args.quick ? 4 : 10 * args.rounds);
  parallel::spawn([&](int rank) { turns_rank(rank, turns, steps * 2, out); }, 3);

  std::ifstream in(out);
  std::string kind;
  double single_rank = 0;
  std::map<std::string, std::vector<double>> cnn;       // variant -> seconds per step, per pass
  std::map<std::string, std::vector<double>> turns_of;  // section 3: config -> per turn
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
      (kind == "turn" ? turns_of : cnn)[variant].push_back(t);
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
  const std::vector<double>& solo = turns_of["1-rank"];
  std::printf("3. the same, 1 rank and the pair alive at once, taking turns (%zu of each)\n",
              solo.size());
  std::printf("  1 rank (2 threads):  %7.0f img/s\n", 64 / bench::median(solo));
  for (const char* config : {"shm", "no-sync"}) {
    const std::vector<double>& t = turns_of[config];
    std::vector<double> ratio;  // within each cycle of three turns
    for (size_t c = 0; c < std::min(solo.size(), t.size()); ++c) ratio.push_back(solo[c] / t[c]);
    std::printf("  2 ranks (1 thread), %-8s: %7.0f img/s  (2 ranks / 1 rank = %.3f [%.2f-%.2f])\n",
                config, 64 / bench::median(t), bench::median(ratio),
                *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()));
  }
  std::remove(out.c_str());
  return 0;
}
