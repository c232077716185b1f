// bench/comm_bench.cpp — all-reduce bandwidth of 2 ranks on this machine, 4 KB to 64 MB of
// float32, over each CPU transport in one run: Gloo (TCP over loopback), shared memory (2
// processes: as configured by default, with every call on its worker thread, and with the
// direct algorithm at every size), threads (2 ranks in this process, cpu:0 and cpu:1),
// and memcpy of the same bytes as the bound. algbw = bytes / time (for 2 ranks it equals
// nccl-tests' busbw). Per size: the median of single calls per round, then the median over rounds.
// The rounds take turns between the transports, and shm/gloo is the median of the per-round
// ratios (with their range): each ratio compares two moments seconds apart, not two medians.
// Open MPI's own all-reduce is measured by bench/comm_bench.sh (bench/shm_vs_mpi.cpp) in turn
// with Tandem's shm in the same processes, and handed over in the file TANDEM_MPI_RESULTS names:
// its shm/mpi column is that side-by-side ratio (median over rounds, with its range), not this
// program's shm column over an MPI run made before it.
//   bash bench/comm_bench.sh [rounds]    or    build-bench/bench/comm_bench [--rounds N]
#include <pthread.h>
#include <tandem/parallel/comm/shm_communicator.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/store/prefix_store.h>
#include <tandem/tandem.h>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "bench_util.h"

using namespace tandem;

namespace {

const std::vector<int64_t> kSizes{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

// The calls per round at a size: enough that a round lasts ~50 ms, the same on every rank.
int reps_for(int64_t bytes) { return int(std::clamp<int64_t>((64 << 20) / bytes, 4, 400)); }

// Keeps this CPU busy for `seconds`. On the 2-vCPU VMs, ranks that were idle (another
// transport's round: Gloo's ranks sleep on their sockets) are put on one vCPU when they wake, and
// stay there for tens of milliseconds: a 4 KB shm round (0.5 ms when the ranks have a CPU each)
// then runs entirely while they take turns on one, 20x slower. Both ranks busy for 20 ms before
// each round makes the scheduler spread them first, for every transport alike.
void busy_for(double seconds) {
  const double end = bench::now_s() + seconds;
  while (bench::now_s() < end) {
  }
}

// Per round, the median time (s) of one all-reduce of each size through each communicator:
// times[c][size][round]. Rounds alternate between the communicators, so a change in the machine's
// load hits them alike.
using Rounds = std::vector<std::vector<double>>;  // [size][round]
std::vector<Rounds> measure(const std::vector<parallel::Communicator*>& comms, int rounds) {
  std::vector<Rounds> out(comms.size());
  for (int64_t bytes : kSizes) {
    Tensor t = ones({bytes / 4});
    std::vector<std::vector<double>> per_round(comms.size());
    for (auto* c : comms) c->all_reduce(t)->wait();
    for (int r = 0; r < rounds; ++r) {
      for (size_t c = 0; c < comms.size(); ++c) {
        busy_for(0.02);
        comms[c]->barrier()->wait();
        std::vector<double> calls;
        for (int i = 0; i < reps_for(bytes); ++i)
          calls.push_back(bench::time_per_call([&] { comms[c]->all_reduce(t)->wait(); }, 1));
        per_round[c].push_back(bench::median(calls));
      }
    }
    for (size_t c = 0; c < comms.size(); ++c) out[c].push_back(per_round[c]);
  }
  return out;
}

// The transports between 2 processes: Gloo, and shared memory as configured by default, with
// its worker thread always (no inline calls), and with the direct algorithm at every size.
const std::vector<std::string> kProcessVariants{"gloo", "shm", "shm-queued", "shm-direct"};

std::vector<Rounds> over_processes(int rounds) {
  const std::string file = "/tmp/tandem-comm-bench-" + std::to_string(::getpid()) + ".txt";
  parallel::spawn(
      [&](int rank) {
        using namespace std::chrono_literals;
        auto gloo = parallel::init_process_group({.backend = "gloo", .timeout = 120s});
        auto store = parallel::default_store();
        auto shm = [&](const std::string& name, parallel::ShmOptions o) {
          return std::make_shared<parallel::ShmCommunicator>(
              std::make_shared<parallel::PrefixStore>(name, store), rank, 2, o);
        };
        auto fast = shm("shm", {.timeout = 120s});
        auto queued = shm("queued", {.timeout = 120s, .inline_when_idle = false});
        auto direct = shm("direct", {.timeout = 120s, .direct_bytes = SIZE_MAX});
        const auto times = measure({gloo.get(), fast.get(), queued.get(), direct.get()}, rounds);
        if (rank == 0) {
          std::ofstream f(file);
          for (const Rounds& variant : times)
            for (const std::vector<double>& size : variant) {
              for (double t : size) f << t << " ";
              f << "\n";
            }
        }
        fast.reset(), queued.reset(), direct.reset();
        parallel::destroy_process_group();
      },
      2);
  std::vector<Rounds> times(kProcessVariants.size(), Rounds(kSizes.size()));
  std::ifstream in(file);
  for (Rounds& variant : times)
    for (std::vector<double>& size : variant) {
      size.resize(size_t(rounds));
      for (double& t : size) in >> t;
    }
  std::remove(file.c_str());
  return times;
}

// The time a cache line takes to go from CPU 0 to CPU 1 and back (two threads pinned there
// bounce one atomic word), in ns: the floor under every small transfer between 2 ranks. On the
// 2-vCPU VMs this project runs on, it changes between runs (and within one), and every
// transport's small calls change with it; printed at the start and end so a run says which.
double core_round_trip_ns() {
  cpu_set_t allowed;
  if (pthread_getaffinity_np(pthread_self(), sizeof(allowed), &allowed) != 0) return 0;
  std::vector<int> cpus;  // the first two this process may use
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) return 0;  // two spinners on one CPU: no meaning
  auto pin = [](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
  };
  std::atomic<uint32_t> word{0};
  std::atomic<bool> pinned{true};
  constexpr uint32_t kTrips = 20000;
  std::thread echo([&] {
    if (!pin(cpus[1])) pinned = false;
    for (uint32_t i = 1; i < 2 * kTrips; i += 2) {
      while (word.load(std::memory_order_acquire) != i) {
      }
      word.store(i + 1, std::memory_order_release);
    }
  });
  if (!pin(cpus[0])) pinned = false;
  const double t0 = bench::now_s();
  for (uint32_t i = 0; i < 2 * kTrips; i += 2) {
    word.store(i + 1, std::memory_order_release);
    while (word.load(std::memory_order_acquire) != i + 2) {
    }
  }
  const double ns = (bench::now_s() - t0) / kTrips * 1e9;
  echo.join();
  // Back to what it was: the ranks forked later inherit this thread's mask.
  pthread_setaffinity_np(pthread_self(), sizeof(allowed), &allowed);
  return pinned ? ns : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 7);
  bench::report_load();
  const double trip_before = core_round_trip_ns();
  std::map<std::string, Rounds> times;
  const auto processes = over_processes(args.rounds);
  for (size_t v = 0; v < kProcessVariants.size(); ++v) times[kProcessVariants[v]] = processes[v];
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        const auto t = measure({group.get()}, args.rounds);
        if (group->rank() == 0) times["threads"] = t[0];
      },
      2);
  struct Paired {  // bench/shm_vs_mpi's line for one size
    double mpi_s, shm_s, ratio, ratio_min, ratio_max;
  };
  std::map<int64_t, Paired> mpi;
  if (const char* file = std::getenv("TANDEM_MPI_RESULTS")) {
    std::ifstream in(file);
    double bytes = 0;
    for (Paired p; in >> bytes >> p.mpi_s >> p.shm_s >> p.ratio >> p.ratio_min >> p.ratio_max;)
      mpi[int64_t(bytes)] = p;
  }
  std::printf(
      "All-reduce (sum), 2 ranks on one machine, float32; algbw in GB/s (medians of %d "
      "rounds)\n",
      args.rounds);
  std::printf("%9s %8s %8s %8s %8s %8s %8s %9s %13s %10s | side by side: %8s %8s %8s  %s\n", "size",
              "gloo", "shm", "queued", "direct", "threads", "memcpy", "shm/gloo", "[range]",
              "shm/memcpy", "open-mpi", "shm", "shm/mpi", "[range]");
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const double bytes = double(kSizes[i]);
    std::vector<char> src(static_cast<size_t>(bytes), 1), dst(static_cast<size_t>(bytes));
    auto copy = [&] { std::memcpy(dst.data(), src.data(), src.size()); };
    copy();
    std::vector<double> copies;
    for (int r = 0; r < args.rounds; ++r)
      copies.push_back(bench::time_per_call(copy, reps_for(kSizes[i])));
    auto bw = [&](const std::string& v) { return bytes / bench::median(times[v][i]) / 1e9; };
    const double shm = bw("shm"), mc = bytes / bench::median(copies) / 1e9;
    std::vector<double> ratio;  // shm/gloo in speed, within each round
    for (size_t r = 0; r < times["shm"][i].size(); ++r)
      ratio.push_back(times["gloo"][i][r] / times["shm"][i][r]);
    std::printf("%6.0f KB %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.1fx [%5.1f-%5.1f] %9.0f%% |",
                bytes / 1024, bw("gloo"), shm, bw("shm-queued"), bw("shm-direct"), bw("threads"),
                mc, bench::median(ratio), *std::min_element(ratio.begin(), ratio.end()),
                *std::max_element(ratio.begin(), ratio.end()), 100 * shm / mc);
    if (mpi.count(kSizes[i]) == 0) {
      std::printf("\n");
      continue;
    }
    const Paired& p = mpi[kSizes[i]];
    std::printf("               %8.2f %8.2f %7.2fx  [%.2f-%.2f]\n", bytes / p.mpi_s / 1e9,
                bytes / p.shm_s / 1e9, p.ratio, p.ratio_min, p.ratio_max);
  }
  std::printf(
      "core-to-core round trip (two pinned threads; 0 = could not pin two CPUs): %.0f ns at the "
      "start, %.0f ns at the end\n",
      trip_before, core_round_trip_ns());
  return 0;
}
