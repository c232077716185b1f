// parallel/supervisor.h — running a group of worker processes as one job: what `tandem launch`
// and parallel::spawn share. Each worker's stdout and stderr lines are prefixed with its rank
// ("[rank1]: ...", as torchrun's --tee does); SIGINT/SIGTERM/SIGHUP sent to the supervisor are
// forwarded to the workers; when a worker fails, the others get SIGTERM, then SIGKILL after a
// grace period, and the result names the first failure.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::parallel::detail {

struct WorkerSpec {
  int rank = 0;  // global rank, for the output prefix and the failure report
  int local_rank = 0;
  std::vector<std::pair<std::string, std::string>> env;  // set in the child before `run`
  /// Runs in the forked child (exec a program, or call a function); its return value is the
  /// child's exit code. Exceptions escaping it are printed and exit with 1.
  std::function<int()> run;
};

struct SupervisorOptions {
  bool prefix_output = true;
  std::chrono::milliseconds kill_grace{std::chrono::seconds(5)};  // SIGTERM -> SIGKILL
  std::string program;                 // for the report ("./train FAILED")
  bool stop_others_on_failure = true;  // false: let the others run on (fault-injection tests)
};

struct WorkerFailure {
  int rank = -1, local_rank = -1;
  int pid = 0;
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it
  std::string time;   // when the supervisor saw it, "2026-11-21_05:02:17"
};

struct SupervisorResult {
  int exit_code = 0;  // 0 if every worker succeeded, else the first failure's (128 + signal)
  std::optional<WorkerFailure> first_failure;
  std::string report;  // empty on success; torchrun-like summary otherwise
};

/// Forks one process per spec, supervises them to the end, and reports.
SupervisorResult supervise(const std::vector<WorkerSpec>& workers,
                           const SupervisorOptions& options);

}  // namespace tandem::parallel::detail
