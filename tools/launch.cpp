// tools/launch.cpp — `tandem launch`: torchrun for Tandem programs. Starts --nproc-per-node
// workers of `program args…` on this node with torchrun's environment (RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT), so a program that calls
// parallel::init_process_group() needs no flags; the supervisor (parallel/supervisor.h) prefixes
// their output, forwards signals and stops the group when one fails.
//   tandem launch --nproc-per-node 2 -- build/examples/mnist_ddp datasets/mnist
//   tandem launch --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --nproc-per-node 1 -- prog
#include <tandem/core/check.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/supervisor.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "commands.h"

namespace tandem::tools {
namespace {

// Why `program` cannot be executed (as execvp would look for it), or "" if it can. Checked once
// here, so a missing program is one clear message rather than one per worker.
std::string cannot_execute(const std::string& program) {
  auto why = [](const std::string& path) -> std::string {
    if (::access(path.c_str(), F_OK) != 0) return "no such file";
    if (::access(path.c_str(), X_OK) != 0) return "not executable";
    return "";
  };
  if (program.find('/') != std::string::npos) return why(program);
  const char* path_env = std::getenv("PATH");
  const std::string dirs = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    if (why(dir + "/" + program).empty()) return "";
    start = end + 1;
  }
  return "not found in PATH";
}

}  // namespace

int run_launch(const LaunchOptions& o) {
  TD_CHECK_VALUE(!o.command.empty(),
                 "launch: no program given (usage: tandem launch [options] "
                 "-- program args...)");
  TD_CHECK_VALUE(o.nproc_per_node >= 0, "launch: --nproc-per-node ", o.nproc_per_node,
                 " is negative (0 means one worker per core)");
  TD_CHECK_VALUE(o.kill_grace_s >= 0, "launch: --kill-grace ", o.kill_grace_s,
                 " is negative (seconds between SIGTERM and SIGKILL)");
  if (const std::string why = cannot_execute(o.command.front()); !why.empty()) {
    std::fprintf(stderr, "tandem launch: cannot run '%s': %s; no worker was started\n",
                 o.command.front().c_str(), why.c_str());
    return 127;  // the shell's "command not found"
  }
  int nproc = o.nproc_per_node;
  if (nproc <= 0) nproc = int(std::max(1u, std::thread::hardware_concurrency()));
  const int nnodes = o.standalone ? 1 : o.nnodes;
  const int node_rank = o.standalone ? 0 : o.node_rank;
  TD_CHECK_VALUE(node_rank >= 0 && node_rank < nnodes, "launch: --node-rank ", node_rank,
                 " is not in [0, ", nnodes, ")");
  const std::string addr = o.standalone ? "127.0.0.1" : o.master_addr;
  const int port = o.standalone ? parallel::detail::free_port(addr) : o.master_port;
  const int world = nnodes * nproc;
  if (nproc > 1 && std::getenv("TANDEM_NUM_THREADS") == nullptr)
    std::cerr << "tandem launch: " << nproc << " workers share this machine's "
              << std::thread::hardware_concurrency()
              << " cores: each gets TANDEM_NUM_THREADS (and OMP/OPENBLAS_NUM_THREADS) = "
              << std::max(1u, std::thread::hardware_concurrency() / unsigned(nproc))
              << " unless you set it\n";

  TD_CHECK_VALUE(o.max_restarts == 0 || nnodes == 1, "launch: --max-restarts ", o.max_restarts,
                 " restarts the group of one node; with --nnodes ", nnodes,
                 " the other nodes would not restart with it (use --nnodes 1 or --standalone)");
  // Each attempt starts every worker afresh, with TANDEM_RESTART_COUNT (and torchrun's
  // TORCHELASTIC_RESTART_COUNT) saying which attempt it is: a trainer resumes from its
  // checkpoint when it is not the first.
  for (int attempt = 0;; ++attempt) {
    const int attempt_port = attempt > 0 && o.standalone ? parallel::detail::free_port(addr) : port;
    std::vector<parallel::detail::WorkerSpec> workers;
    for (int local = 0; local < nproc; ++local) {
      const int rank = node_rank * nproc + local;
      auto env =
          parallel::detail::worker_env(rank, local, world, nproc, node_rank, addr, attempt_port);
      for (auto& [name, value] : env)
        if (name == "TORCHELASTIC_RESTART_COUNT") value = std::to_string(attempt);
      env.emplace_back("TANDEM_RESTART_COUNT", std::to_string(attempt));
      workers.push_back(parallel::detail::WorkerSpec{
          .rank = rank, .local_rank = local, .env = std::move(env), .run = [&o] {
            std::vector<char*> argv;
            for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
            argv.push_back(nullptr);
            ::execvp(argv[0], argv.data());
            std::fprintf(stderr, "tandem launch: cannot run '%s': %s\n", argv[0],
                         std::strerror(errno));
            return 127;
          }});
    }
    const auto start = std::chrono::steady_clock::now();
    const auto result = parallel::detail::supervise(
        workers, {.prefix_output = !o.no_prefix,
                  .kill_grace = std::chrono::milliseconds(int64_t(o.kill_grace_s * 1000)),
                  .program = o.command.front()});
    if (result.exit_code == 0) return 0;
    std::cerr << "tandem launch: " << result.report;
    if (attempt >= o.max_restarts) return result.exit_code;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 "tandem launch: the group stopped after %.1f s; restarting it (restart %d of "
                 "%d)\n",
                 secs, attempt + 1, o.max_restarts);
  }
}

}  // namespace tandem::tools
