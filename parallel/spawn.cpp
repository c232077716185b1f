// parallel/spawn.cpp — parallel::spawn on top of the supervisor, and the worker environment that
// `tandem launch` uses too.
#include <dirent.h>
#include <tandem/autograd/device_workers.h>
#include <tandem/core/check.h>
#include <tandem/core/thread_pool.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/socket.h>
#include <tandem/parallel/supervisor.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

// ThreadSanitizer runs a thread of its own in every process it watches.
#if defined(__SANITIZE_THREAD__)
#define TANDEM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_TSAN 1
#endif
#endif

namespace tandem::parallel {

namespace detail {

std::vector<std::pair<std::string, std::string>> worker_env(int rank, int local_rank, int world,
                                                            int local_world, int node_rank,
                                                            const std::string& master_addr,
                                                            int master_port) {
  std::vector<std::pair<std::string, std::string>> env{
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
      {"GROUP_RANK", std::to_string(node_rank)},
      {"ROLE_RANK", std::to_string(rank)},
      {"ROLE_WORLD_SIZE", std::to_string(world)},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
  };
  // N workers on one machine share its cores; without this each would start a pool of all of
  // them and the machine would be oversubscribed N times (torchrun sets OMP_NUM_THREADS=1).
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string threads = std::to_string(std::max(1, cores / std::max(1, local_world)));
  for (const char* name : {"TANDEM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    if (std::getenv(name) == nullptr) env.emplace_back(name, threads);
  return env;
}

}  // namespace detail

namespace {

// The threads of this process besides the caller, by name ("td-store", or the program's name for
// a thread that was never named).
std::vector<std::string> other_threads() {
  std::vector<std::string> names;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return names;  // no /proc: nothing to check
  const std::string self = std::to_string(::gettid());
  while (const dirent* e = ::readdir(dir)) {
    const std::string tid = e->d_name;
    if (tid == "." || tid == ".." || tid == self) continue;
    std::string name;
    std::getline(std::ifstream("/proc/self/task/" + tid + "/comm"), name);
    names.push_back(name.empty() ? tid : name);
  }
  ::closedir(dir);
  return names;
}

// A fork copies only the calling thread: a lock another thread held stays locked in the child for
// good, and ThreadSanitizer refuses to start threads there. So spawn forks only a process with one
// thread, after ending Tandem's own idle threads (they start again on next use).
void fork_only_single_threaded() {
  DeviceWorkers::release_all_threads();
  tandem::detail::release_threads();
  std::vector<std::string> others;
#ifdef TANDEM_TSAN
  std::string program;  // the sanitizer's own thread is named as the program is
  std::getline(std::ifstream("/proc/self/comm"), program);
#endif
  // A thread just joined can stay listed for a moment while the kernel finishes its exit: look
  // again for up to 200 ms before taking it for one that is running.
  for (int tries = 0; tries < 200; ++tries) {
    others = other_threads();
#ifdef TANDEM_TSAN
    if (const auto it = std::find(others.begin(), others.end(), program); it != others.end())
      others.erase(it);
#endif
    if (others.empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string names;
  for (const std::string& n : others) names += (names.empty() ? "" : ", ") + n;
  TD_CHECK_AS(DistributedError, others.empty(), "spawn: this process runs ", others.size(),
              " thread(s) besides the caller (", names,
              "), and a fork copies only the caller: a child could wait for good on a lock one of "
              "them held. Call spawn() before starting threads of your own or a process group, "
              "run the ranks as threads (parallel::spawn_threads), or start the program once "
              "per rank with `tandem launch`");
}

}  // namespace

void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options) {
  TD_CHECK_VALUE(nprocs >= 1, "spawn: expected nprocs >= 1, but got ", nprocs);
  fork_only_single_threaded();
  const int port =
      options.master_port > 0 ? options.master_port : detail::free_port(options.master_addr);
  std::vector<detail::WorkerSpec> workers;
  for (int r = 0; r < nprocs; ++r) {
    workers.push_back(detail::WorkerSpec{
        .rank = r,
        .local_rank = r,
        .env = detail::worker_env(r, r, nprocs, nprocs, 0, options.master_addr, port),
        .run = [&fn, r] {
          fn(r);
          // The worker ends with _exit (no static destructors): say goodbye to the heartbeat
          // here, or the others would take its silence for a death.
          end_heartbeat();
          return 0;
        }});
  }
  const auto result =
      detail::supervise(workers, {.prefix_output = options.prefix_output,
                                  .kill_grace = options.kill_grace,
                                  .program = "spawn",
                                  .stop_others_on_failure = options.stop_others_on_failure});
  TD_CHECK_AS(DistributedError, result.exit_code == 0, "spawn: rank ", result.first_failure->rank,
              " failed\n", result.report);
}

}  // namespace tandem::parallel
