// bench/comm_bench.cpp — all-reduce bandwidth of 2 ranks on this machine, 4 KB to 64 MB of
// float32, over each CPU transport in one run: Gloo (TCP over loopback), shared memory (2
// processes), threads (2 ranks in this process, cpu:0 and cpu:1), and memcpy of the same bytes
// as the bound. algbw = bytes / time (for 2 ranks it equals nccl-tests' busbw). Per size: the
// median of single calls per round, then the median over rounds. Open MPI's own all-reduce is
// measured beside it by bench/comm_bench.sh (bench/mpi_allreduce.cpp), which hands its times
// over in the file TANDEM_MPI_RESULTS names.
//   bash bench/comm_bench.sh [rounds]    or    build-bench/bench/comm_bench [--rounds N]
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/tandem.h>
#include <cstring>
#include <fstream>
#include <map>

#include "bench_util.h"

using namespace tandem;

namespace {

const std::vector<int64_t> kSizes{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

// The calls per round at a size: enough that a round lasts ~50 ms, the same on every rank.
int reps_for(int64_t bytes) { return int(std::clamp<int64_t>((64 << 20) / bytes, 4, 400)); }

// Median time (s) of one all-reduce of each size through `comm`.
std::vector<double> measure(parallel::Communicator& comm, int rounds) {
  std::vector<double> out;
  for (int64_t bytes : kSizes) {
    Tensor t = ones({bytes / 4});
    auto all_reduce = [&] { comm.all_reduce(t)->wait(); };
    all_reduce();
    std::vector<double> times;
    for (int r = 0; r < rounds; ++r) {
      comm.barrier()->wait();
      std::vector<double> calls;
      for (int i = 0; i < reps_for(bytes); ++i)
        calls.push_back(bench::time_per_call(all_reduce, 1));
      times.push_back(bench::median(calls));
    }
    out.push_back(bench::median(times));
  }
  return out;
}

std::vector<double> over_processes(const std::string& backend, int rounds) {
  const std::string file = "/tmp/tandem-comm-bench-" + std::to_string(::getpid()) + ".txt";
  parallel::spawn(
      [&](int rank) {
        auto comm = parallel::init_process_group(
            {.backend = backend, .timeout = std::chrono::seconds(120)});
        const auto times = measure(*comm, rounds);
        if (rank == 0) {
          std::ofstream f(file);
          for (double t : times) f << t << "\n";
        }
        parallel::destroy_process_group();
      },
      2);
  std::vector<double> times;
  std::ifstream in(file);
  for (double t; in >> t;) times.push_back(t);
  std::remove(file.c_str());
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 7);
  bench::report_load();
  std::map<std::string, std::vector<double>> times;
  times["gloo"] = over_processes("gloo", args.rounds);
  times["shm"] = over_processes("shm", args.rounds);
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        const auto t = measure(*group, args.rounds);
        if (group->rank() == 0) times["threads"] = t;
      },
      2);
  std::map<int64_t, double> mpi;  // bytes -> seconds, from bench/mpi_allreduce
  if (const char* file = std::getenv("TANDEM_MPI_RESULTS")) {
    std::ifstream in(file);
    for (double bytes, t; in >> bytes >> t;) mpi[int64_t(bytes)] = t;
  }
  std::printf(
      "All-reduce (sum), 2 ranks on one machine, float32; algbw in GB/s (medians of %d "
      "rounds)\n",
      args.rounds);
  std::printf("%9s %9s %9s %9s %9s %9s %10s %9s %12s\n", "size", "gloo", "shm", "threads",
              "open-mpi", "memcpy", "shm/gloo", "shm/mpi", "shm/memcpy");
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const double bytes = double(kSizes[i]);
    std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
    auto copy = [&] { std::memcpy(dst.data(), src.data(), src.size()); };
    copy();
    std::vector<double> copies;
    for (int r = 0; r < args.rounds; ++r)
      copies.push_back(bench::time_per_call(copy, reps_for(kSizes[i])));
    const double gloo = bytes / times["gloo"][i] / 1e9, shm = bytes / times["shm"][i] / 1e9;
    const double thr = bytes / times["threads"][i] / 1e9, mc = bytes / bench::median(copies) / 1e9;
    const double ompi = mpi.count(kSizes[i]) ? bytes / mpi[kSizes[i]] / 1e9 : 0.0;
    std::printf("%6.0f KB %9.2f %9.2f %9.2f %9.2f %9.2f %9.1fx %8.2fx %11.0f%%\n", bytes / 1024,
                gloo, shm, thr, ompi, mc, shm / gloo, ompi > 0 ? shm / ompi : 0.0, 100 * shm / mc);
  }
  return 0;
}
