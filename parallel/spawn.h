// parallel/spawn.h — start N ranks from inside a program (torch.multiprocessing.spawn):
//   parallel::spawn([](int rank) { parallel::init_process_group(); ... }, 2);
// Each rank is a forked child with the launcher's environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT = a free port), output prefixed "[rankN]: ".
// If one rank fails, the others are stopped and spawn throws a DistributedError naming it.
// Call it before creating threads of your own or a process group: a fork copies only the calling
// thread (Tandem's own thread pool is rebuilt in the child).
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
