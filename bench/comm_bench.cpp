// bench/comm_bench.cpp — Gloo all-reduce bandwidth between 2 processes on this machine (TCP over
// loopback), 1–64 MB of float32, against memcpy of the same bytes in the same run. algbw =
// bytes / time (for 2 ranks it equals nccl-tests' busbw). Medians of single calls per round,
// then over rounds.
//   build-bench/bench/comm_bench [--rounds N] [--quick]
#include <tandem/tandem.h>
#include <cstring>
#include <fstream>

#include "bench_util.h"

using namespace tandem;

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 7);
  bench::report_load();
  const std::vector<int> sizes_mb{1, 4, 16, 64};
  const std::string out = "/tmp/tandem-comm-bench-" + std::to_string(::getpid()) + ".txt";
  parallel::spawn(
      [&](int rank) {
        auto comm = parallel::init_process_group({.timeout = std::chrono::seconds(120)});
        std::ofstream report;
        if (rank == 0) report.open(out);
        for (int mb : sizes_mb) {
          const int64_t n = int64_t(mb) << 18;  // floats
          Tensor t = ones({n});
          auto all_reduce = [&] { comm->all_reduce(t)->wait(); };
          // Both ranks must run the same number of calls: fix the count instead of calibrating.
          const int reps = std::max(2, 64 / mb);
          all_reduce();
          // Per round: the median of single calls (as reference.md measures; a 2-core machine
          // makes some calls several times slower when a TCP thread is descheduled), then the
          // median over rounds.
          std::vector<double> times;
          for (int r = 0; r < args.rounds; ++r) {
            comm->barrier()->wait();
            std::vector<double> calls;
            for (int i = 0; i < reps; ++i) calls.push_back(bench::time_per_call(all_reduce, 1));
            times.push_back(bench::median(calls));
          }
          if (rank != 0) continue;
          std::vector<char> src(size_t(n) * 4, 1), dst(size_t(n) * 4);
          auto copy = [&] { std::memcpy(dst.data(), src.data(), src.size()); };
          std::vector<double> copies;
          for (int r = 0; r < args.rounds; ++r) copies.push_back(bench::time_per_call(copy, reps));
          const double bytes = double(n) * 4, ar = bench::median(times), mc = bench::median(copies);
          report << mb << " " << ar << " " << bytes / ar / 1e9 << " " << bytes / mc / 1e9 << "\n";
        }
        parallel::destroy_process_group();
      },
      2);
  std::printf("Gloo all-reduce (sum), 2 ranks on one machine, float32, medians of %d rounds\n",
              args.rounds);
  std::printf("%8s %12s %14s %14s %10s\n", "size", "time", "algbw", "memcpy", "gloo/memcpy");
  std::ifstream in(out);
  for (double mb, t, bw, mc; in >> mb >> t >> bw >> mc;)
    std::printf("%6.0f MB %9.2f ms %9.2f GB/s %9.2f GB/s %9.1f %%\n", mb, t * 1e3, bw, mc,
                100 * bw / mc);
  std::remove(out.c_str());
  return 0;
}
