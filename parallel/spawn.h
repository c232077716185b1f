// parallel/spawn.h — start N ranks from inside a program (torch.multiprocessing.spawn):
//   parallel::spawn([](int rank) { parallel::init_process_group(); ... }, 2);
// Each rank is a forked child with the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT = a free port), output prefixed "[rankN]: ".
// If one rank fails, the others are stopped and spawn throws a DistributedError naming it.
// A fork copies only the calling thread, so spawn forks only a process with no other thread: it
// first ends Tandem's idle threads (the CPU pool, OpenBLAS's and OpenMP's, backward and pipeline
// workers; each starts again on next use) and throws a DistributedError naming any thread that is
// left (yours, a process group's). Call it before starting threads of your own.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::parallel {

struct SpawnOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port
  bool prefix_output = true;
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};
  bool stop_others_on_failure = true;  // false: the others run on (fault-injection tests)
};

/// Runs fn(rank) in `nprocs` processes and waits for all of them.
void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options = {});

namespace detail {
/// The environment a worker gets, as torchrun sets it (plus thread counts that share the cores
/// among the local workers, unless already set).
std::vector<std::pair<std::string, std::string>> worker_env(int rank, int local_rank, int world,
                                                            int local_world, int node_rank,
                                                            const std::string& master_addr,
                                                            int master_port);
}  // namespace detail

}  // namespace tandem::parallel
