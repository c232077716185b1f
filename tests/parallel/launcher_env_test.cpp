// tests/parallel/launcher_env_test.cpp — a rank learns who it is from tandem launch, mpirun or
// Slurm, in that order of precedence.
#include <gtest/gtest.h>
#include <tandem/parallel/launcher_env.h>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace tandem::parallel {
namespace {

// Sets variables for one test and restores the environment after it.
class Env {
 public:
  Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* n : kAll) {
      const char* v = std::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
    for (auto [n, v] : vars) ::setenv(n, v, 1);
  }
  ~Env() {
    for (auto& [n, v] : saved_)
      v ? (void)::setenv(n.c_str(), v->c_str(), 1) : (void)::unsetenv(n.c_str());
  }

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

TEST(LauncherEnv, TorchrunStyleVariablesComeFirst) {
  Env env{{"RANK", "3"},           {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},     {"OMPI_COMM_WORLD_RANK", "5"},
          {"SLURM_PROCID", "6"},   {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"}};
  EXPECT_EQ(env_rank(), 3);
  EXPECT_EQ(env_world_size(), 8);
  EXPECT_EQ(env_local_rank(), 1);
  EXPECT_EQ(env_master_addr(), "10.0.0.1");
  EXPECT_EQ(env_master_port(), 29500);
  EXPECT_TRUE(launched_by_mpi() == false);
}

TEST(LauncherEnv, MpirunsVariables) {
  Env env{{"OMPI_COMM_WORLD_RANK", "1"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_EQ(env_rank(), 1);
  EXPECT_EQ(env_world_size(), 4);
  EXPECT_EQ(env_local_rank(), 1);
  EXPECT_EQ(env_local_world_size(), 2);
  EXPECT_TRUE(launched_by_mpi());
  EXPECT_EQ(env_master_addr(), "");
}

TEST(LauncherEnv, SlurmsVariablesIncludingTheMasterFromTheNodeList) {
  Env env{{"SLURM_PROCID", "5"},      {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "1"},     {"SLURM_NTASKS_PER_NODE", "4"},
          {"SLURM_JOB_ID", "123456"}, {"SLURM_JOB_NODELIST", "gpu[007-009,012],cpu1"}};
  EXPECT_EQ(env_rank(), 5);
  EXPECT_EQ(env_world_size(), 8);
  EXPECT_EQ(env_local_rank(), 1);
  EXPECT_EQ(env_local_world_size(), 4);
  EXPECT_EQ(env_master_addr(), "gpu007");
  EXPECT_EQ(env_master_port(), 20000 + 123456 % 10000);
}

TEST(LauncherEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("n[3-4]"), "n3");
  EXPECT_EQ(first_slurm_host("rack[01-02]-node[7,9],x"), "rack01-node7");
}

}  // namespace
}  // namespace tandem::parallel
