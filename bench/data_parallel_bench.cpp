// bench/data_parallel_bench.cpp — DataParallel's throughput against its two peers, in one run: the
// MNIST reference CNN, global batch 64, Adam, on this machine's cores.
//   one device: the model on cpu, the intra-op pool on every core;
//   DataParallel over cpu:0,cpu:1: two replicas of 32 images at once, one core each (the pool
//     gives each of the two replica threads its fair share: itself);
//   DDP, 2 ranks: two processes of 32 images each, one core each, Gloo all-reduce.
// One device and DataParallel alternate round by round; DDP runs first, in forked ranks (a process
// must fork before it starts threads). Medians of single steps; images/s and their ratios.
//   build-bench/bench/data_parallel_bench [--rounds N] [--quick]
#include <tandem/tandem.h>
#include <fstream>

#include "bench_util.h"
#include "reference_models.h"

using namespace tandem;

namespace {

constexpr int64_t kBatch = 64;

// Median seconds of one Adam step of `forward_loss`, over `steps` steps after 2 warm-up steps.
template <typename ForwardLoss>
double median_step(optim::Adam& opt, ForwardLoss&& forward_loss, int steps) {
  auto step = [&] {
    opt.zero_grad();
    forward_loss().backward();
    opt.step();
  };
  step();
  step();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) t.push_back(bench::time_per_call(step, 1));
  return bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 5);
  bench::report_load();
  const int steps = args.quick ? 5 : 15;
  std::printf("reference CNN, global batch %ld, Adam; median step of %d, %d rounds\n", long(kBatch),
              steps, args.rounds);

  // DDP, 2 ranks, first: forked before this process starts any thread.
  const std::string out = "/tmp/tandem-dp-bench-" + std::to_string(::getpid()) + ".txt";
  parallel::spawn(
      [&](int rank) {
        parallel::init_process_group({.timeout = std::chrono::seconds(300)});
        manual_seed(0);
        bench::ReferenceCnn model;
        parallel::DistributedDataParallel<bench::ReferenceCnn> ddp(model);
        optim::Adam opt(model.parameters(), {.lr = 1e-3});
        const Tensor x = randn({kBatch / 2, 1, 28, 28});
        const Tensor y = zeros({kBatch / 2}, {.dtype = kInt64});
        std::vector<double> t;
        for (int r = 0; r < args.rounds; ++r)
          t.push_back(median_step(
              opt, [&] { return cross_entropy(ddp(x), y); }, steps));
        if (rank == 0) std::ofstream(out) << bench::median(t);
        parallel::destroy_process_group();
      },
      2);
  double ddp_s = 0;
  std::ifstream(out) >> ddp_s;
  std::remove(out.c_str());

  manual_seed(1);
  const Tensor x = randn({kBatch, 1, 28, 28});
  const Tensor y = zeros({kBatch}, {.dtype = kInt64});
  manual_seed(0);
  bench::ReferenceCnn single;
  optim::Adam single_opt(single.parameters(), {.lr = 1e-3});
  manual_seed(0);
  parallel::DataParallel dp(bench::ReferenceCnn{},
                            {.device_ids = {Device::cpu(0), Device::cpu(1)}});
  optim::Adam dp_opt(dp.module().parameters(), {.lr = 1e-3});
  std::vector<double> t_single, t_dp;
  for (int r = 0; r < args.rounds; ++r) {
    t_single.push_back(median_step(
        single_opt, [&] { return cross_entropy(single.forward(x), y); }, steps));
    t_dp.push_back(median_step(
        dp_opt, [&] { return cross_entropy(dp(x), y); }, steps));
  }
  const double single_ips = kBatch / bench::median(t_single);
  const double dp_ips = kBatch / bench::median(t_dp);
  const double ddp_ips = kBatch / ddp_s;
  std::printf("  one device (%d threads):             %7.0f img/s\n", get_num_threads(),
              single_ips);
  std::printf("  DataParallel cpu:0,cpu:1 (1 each):   %7.0f img/s\n", dp_ips);
  std::printf("  DDP, 2 ranks (1 thread each):        %7.0f img/s\n", ddp_ips);
  std::printf("DataParallel / one device = %.2f   (bar: >= 0.85)\n", dp_ips / single_ips);
  std::printf("DataParallel / DDP        = %.2f   (bar: >= 1.00)\n", dp_ips / ddp_ips);
  return 0;
}
