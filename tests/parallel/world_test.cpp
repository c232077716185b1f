// tests/parallel/world_test.cpp — one world for every consumer (core/world.h): the launcher's
// variables before a process group, the group's once joined (DistributedSampler's defaults and
// local_device() follow it); and the rendezvous's first step (comm/world_agreement.h), which ends
// ranks told different worlds at once, each naming both, instead of at the timeout.
#include <tandem/core/world.h>
#include <tandem/data/distributed_sampler.h>
#include <tandem/parallel/comm/world_agreement.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <tandem/parallel/store/hash_store.h>
#include <chrono>
#include <thread>

#include "data/temp_dir.h"
#include "parallel/collective_suite.h"
#include "support/expect.h"
#include "support/launcher_vars.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::require;
using ::testing::HasSubstr;

TEST(World, IsTheGroupsOnceJoinedAndTheLaunchersOtherwise) {
  tandem::testing::LauncherVars slurm{
      {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}};
  EXPECT_EQ(current_world().rank, 1);
  EXPECT_EQ(current_world().source, "Slurm (SLURM_PROCID, SLURM_NTASKS)");
  EXPECT_EQ(local_device().index(), 1) << "SLURM_LOCALID";
  ::tandem::detail::set_joined_world(3, 4);
  const WorldIdentity joined = current_world();
  EXPECT_EQ(joined.rank, 3);
  EXPECT_EQ(joined.world_size, 4);
  EXPECT_EQ(joined.local_rank, 1) << "the node's layout stays the launcher's";
  EXPECT_EQ(joined.source, "the process group");
  EXPECT_EQ(data::DistributedSampler(8).rank(), 3);
  ::tandem::detail::clear_joined_world();
  EXPECT_EQ(current_world().rank, 1);
  EXPECT_EQ(data::DistributedSampler(8).num_replicas(), 2);
}

// Both ranks' environment says rank 0 of 1; the group they join says rank r of 2, and the
// sampler takes the group's word.
TEST(World, ADefaultSamplerFollowsTheProcessGroup) {
  tandem::testing::TempDir dir;
  spawn(
      [&](int rank) {
        ::setenv("RANK", "0", 1);
        ::setenv("WORLD_SIZE", "1", 1);
        require(data::DistributedSampler(10).num_replicas() == 1, "before: the launcher's world");
        init_process_group({.init_method = "file://" + dir.file("rendezvous"),
                            .rank = rank,
                            .world_size = 2,
                            .timeout = 30s});
        const data::DistributedSampler s(10, {.shuffle = false});
        require(s.rank() == rank && s.num_replicas() == 2, "the sampler's rank and world");
        const std::vector<int64_t> share =
            rank == 0 ? std::vector<int64_t>{0, 2, 4, 6, 8} : std::vector<int64_t>{1, 3, 5, 7, 9};
        require(s.indices(0) == share, "the sampler's share");
        destroy_process_group();
        require(data::DistributedSampler(10).num_replicas() == 1, "after: the launcher's again");
      },
      2);
}

// Each launcher's variables end to end, as that launcher would set them for rank r of 2 (and
// nothing of torchrun's but the rendezvous address): the sampler takes rank r's share before
// the group exists, init_process_group() makes rank r of 2 from them, and the sampler still
// agrees once the group is up.
struct LauncherCase {
  const char* name;
  const char *rank, *world, *local_rank;
};

void PrintTo(const LauncherCase& l, std::ostream* os) { *os << l.name; }

class WorldUnderALauncher : public ::testing::TestWithParam<LauncherCase> {};

TEST_P(WorldUnderALauncher, GivesTheGroupAndTheSamplerItsRankAndWorld) {
  const LauncherCase l = GetParam();
  spawn(
      [&](int rank) {
        const std::string addr = std::getenv("MASTER_ADDR"), port = std::getenv("MASTER_PORT");
        const std::string r = std::to_string(rank);
        tandem::testing::LauncherVars only{{"MASTER_ADDR", addr.c_str()},
                                           {"MASTER_PORT", port.c_str()},
                                           {l.rank, r.c_str()},
                                           {l.world, "2"},
                                           {l.local_rank, r.c_str()}};
        const std::vector<int64_t> share =
            rank == 0 ? std::vector<int64_t>{0, 2, 4, 6, 8} : std::vector<int64_t>{1, 3, 5, 7, 9};
        require(data::DistributedSampler(10, {.shuffle = false}).indices(0) == share,
                "the sampler's share before the group");
        auto comm = init_process_group({.timeout = 30s});
        require(comm->rank() == rank && comm->size() == 2, "the group's rank and size");
        const data::DistributedSampler s(10, {.shuffle = false});
        require(s.rank() == rank && s.num_replicas() == 2 && s.indices(0) == share,
                "the sampler's share in the group");
        destroy_process_group();
      },
      2);
}

INSTANTIATE_TEST_SUITE_P(
    Launchers, WorldUnderALauncher,
    ::testing::Values(LauncherCase{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
                      LauncherCase{"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK"},
                      LauncherCase{"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
                      LauncherCase{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}),
    [](const auto& info) { return std::string(info.param.name); });

// Runs check_world_agreement for each claim on a thread of its own, all on one store; each
// one's error, "" for none.
std::vector<std::string> agree(const std::vector<WorldClaim>& claims,
                               std::chrono::milliseconds timeout) {
  HashStore store;
  std::vector<std::string> errors(claims.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < claims.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        check_world_agreement(store, claims[i], timeout);
      } catch (const DistributedError& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return errors;
}

WorldClaim told(int rank, int world) {
  return {.rank = rank,
          .world_size = world,
          .backend = "cpu",
          .told_by = "torchrun (RANK, WORLD_SIZE)"};
}

TEST(WorldAgreement, RanksToldTheSameWorldMeetInAnyOrder) {
  EXPECT_EQ(agree({told(2, 3), told(0, 3), told(1, 3)}, 10s), std::vector<std::string>(3, ""));
  EXPECT_EQ(agree({told(0, 1)}, 10s), std::vector<std::string>{""});
}

TEST(WorldAgreement, RanksToldDifferentWorldsFailAtOnceEachNamingBoth) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = agree({told(0, 2), told(1, 3)}, 60s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "not at the 60 s timeout";
  EXPECT_THAT(errors[0], HasSubstr("the ranks disagree on the world size"));
  EXPECT_THAT(errors[0],
              HasSubstr("rank 1 was told a world of 3 (by torchrun (RANK, WORLD_SIZE))"));
  EXPECT_THAT(errors[0], HasSubstr("rank 0 (this process) was told a world of 2"));
  EXPECT_THAT(errors[1], HasSubstr("rank 1 (this process) was told a world of 3"));
  EXPECT_THAT(errors[1], HasSubstr("rank 0 was told a world of 2"));
}

// Rank 1 was told 2 where ranks 0 and 2 were told 3: rank 2, whose own word agrees with rank
// 0's, learns from rank 0 why the group failed. And a backend that differs is as fatal.
TEST(WorldAgreement, EveryRankLearnsWhyAndBackendsMustAgreeToo) {
  const auto errors = agree({told(0, 3), told(1, 2), told(2, 3)}, 60s);
  for (const std::string& e : errors) EXPECT_THAT(e, HasSubstr("was told a world of 2"));
  EXPECT_THAT(errors[2], HasSubstr("rank 1 was told a world of 2"));
  WorldClaim nccl = told(1, 2);
  nccl.backend = "nccl";
  const auto backends = agree({told(0, 2), nccl}, 60s);
  EXPECT_THAT(backends[1],
              HasSubstr("rank 1 (this process) asked for \"nccl\", rank 0 for \"cpu\""));
  EXPECT_THAT(backends[0],
              HasSubstr("rank 1 asked for \"nccl\", rank 0 (this process) for \"cpu\""));
}

TEST(WorldAgreement, TwoProcessesWithOneRankOrAMissingRankAreNamed) {
  for (const std::string& e : agree({told(0, 3), told(1, 3), told(1, 3)}, 60s))
    EXPECT_THAT(e, HasSubstr("two processes say they are rank 1 of 3"));
  const auto missing = agree({told(0, 3), told(1, 3)}, 300ms);
  EXPECT_THAT(missing[0], HasSubstr("rank 0 waited 0.3 s for the other ranks of its world of 3, "
                                    "and rank(s) 2 did not arrive"));
  EXPECT_THAT(missing[1], HasSubstr("waited 0.3 s"));
}

TEST(WorldAgreement, ClaimsRoundTripAndJunkIsNamed) {
  const WorldClaim c = detail::decode_claim(detail::encode_claim(told(1, 4)));
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.backend, "cpu");
  EXPECT_EQ(c.told_by, "torchrun (RANK, WORLD_SIZE)");
  EXPECT_THAT(tandem::testing::error_message<DistributedError>(
                  [] { detail::decode_claim("5\n2\ncpu\nx"); }),
              HasSubstr("the store holds '5\n2\ncpu\nx' where a rank's claim"));
}

}  // namespace
}  // namespace tandem::parallel
