// tests/parallel/launcher_env_test.cpp — a rank learns who it is from tandem launch, mpirun or
// Slurm, in that order of precedence.
#include <gtest/gtest.h>
#include <tandem/core/world.h>
#include <tandem/parallel/launcher_env.h>

#include "support/launcher_vars.h"

namespace tandem::parallel {
namespace {

using Env = tandem::testing::LauncherVars;

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

// mpirun inside a Slurm allocation: every rank also carries the batch step's SLURM_PROCID=0 and
// SLURM_NTASKS. All four numbers are mpirun's, none Slurm's.
TEST(LauncherEnv, NumbersComeFromOneLauncherNeverAMix) {
  {
    Env env{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
            {"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "8"},
            {"SLURM_LOCALID", "0"},        {"SLURM_NTASKS_PER_NODE", "8"}};
    const std::optional<WorldIdentity> w = launcher_world();
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(w->rank, 1);
    EXPECT_EQ(w->world_size, 2);
    EXPECT_EQ(w->local_rank, 0);
    EXPECT_EQ(w->local_world_size, -1) << "not Slurm's 8";
    EXPECT_EQ(w->source, "Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)");
  }
  {
    // RANK without WORLD_SIZE: the world size is missing, not another launcher's.
    Env env{{"RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_NTASKS", "8"}};
    EXPECT_EQ(env_rank(), 1);
    EXPECT_EQ(env_world_size(), -1);
    EXPECT_EQ(launcher_world()->world_variable, "WORLD_SIZE");
  }
  {
    Env env{
        {"PMI_RANK", "3"}, {"PMI_SIZE", "5"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}};
    EXPECT_EQ(env_rank(), 3);
    EXPECT_EQ(env_world_size(), 5);
    EXPECT_EQ(env_local_rank(), 1);
    EXPECT_EQ(env_local_world_size(), 2);
    EXPECT_TRUE(launched_by_mpi());
  }
  Env none{};
  EXPECT_FALSE(launcher_world().has_value());
  EXPECT_EQ(current_world().rank, 0);
  EXPECT_EQ(current_world().world_size, 1);
}

TEST(LauncherEnv, FirstSlurmHost) {
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("n[3-4]"), "n3");
  EXPECT_EQ(first_slurm_host("rack[01-02]-node[7,9],x"), "rack01-node7");
}

}  // namespace
}  // namespace tandem::parallel
