// tests/support/launcher_vars.h — one test's launcher variables: every variable of every launcher
// core/world.h reads is cleared, the given ones are set, and the environment is restored at the
// end of the scope (a test run under mpirun or srun would otherwise see its own launcher's).
#pragma once

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tandem::testing {

class LauncherVars {
 public:
  LauncherVars(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* n : kAll) {
      const char* v = std::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
    for (auto [n, v] : vars) ::setenv(n, v, 1);
  }
  ~LauncherVars() {
    for (auto& [n, v] : saved_)
      v ? (void)::setenv(n.c_str(), v->c_str(), 1) : (void)::unsetenv(n.c_str());
  }
  LauncherVars(const LauncherVars&) = delete;
  LauncherVars& operator=(const LauncherVars&) = delete;

 private:
  static constexpr const char* kAll[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "MPI_LOCALRANKID",
                                         "MPI_LOCALNRANKS",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_NTASKS_PER_NODE",
                                         "SLURM_JOB_ID",
                                         "SLURM_JOB_NODELIST",
                                         "SLURM_NODELIST"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace tandem::testing
