// tests/data/distributed_sampler_test.cpp — ranks' shares are disjoint, equal and cover the
// epoch's permutation; set_epoch reshuffles; padding and drop_last behave as PyTorch's.
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/sampler.h>

#include <algorithm>
#include <set>

#include "support/expect.h"
#include "support/launcher_vars.h"

namespace tandem::data {
namespace {

TEST(DistributedSampler, SharesAreDisjointEqualAndCoverTheDataset) {
  for (int64_t world : {1, 2, 3, 4}) {
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < world; ++r) {
      DistributedSampler s(12, {.num_replicas = world, .rank = r, .seed = 5});
      const auto idx = s.indices(0);
      EXPECT_EQ(int64_t(idx.size()), 12 / world);
      seen.insert(idx.begin(), idx.end());
    }
    EXPECT_EQ(seen.size(), 12u);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 12u) << "world " << world;
  }
}

TEST(DistributedSampler, RankSharesInterleaveTheSamePermutationAsRandomSampler) {
  const auto all = RandomSampler(10, 7).indices(3);
  for (int64_t r = 0; r < 2; ++r) {
    const auto mine = DistributedSampler(10, {.num_replicas = 2, .rank = r, .seed = 7}).indices(3);
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], all[2 * i + size_t(r)]);
  }
}

TEST(DistributedSampler, EpochsReshuffleAndSetEpochPinsOne) {
  DistributedSampler s(100, {.num_replicas = 2, .rank = 1});
  EXPECT_NE(s.indices(0), s.indices(1));
  EXPECT_EQ(s.indices(4), s.indices(4));
  s.set_epoch(4);
  EXPECT_EQ(s.indices(), s.indices(4));
}

TEST(DistributedSampler, PadsByRepeatingOrDropsTheTail) {
  // 10 examples over 4 ranks: padded to 12 (3 each, indices 0 and 1 twice) or cut to 8.
  std::multiset<int64_t> padded;
  for (int64_t r = 0; r < 4; ++r) {
    DistributedSampler s(10, {.num_replicas = 4, .rank = r, .shuffle = false});
    EXPECT_EQ(s.size(), 3);
    const auto idx = s.indices(0);
    padded.insert(idx.begin(), idx.end());
  }
  EXPECT_EQ(padded.size(), 12u);
  EXPECT_EQ(padded.count(0), 2u);
  EXPECT_EQ(padded.count(1), 2u);
  DistributedSampler cut(10, {.num_replicas = 4, .rank = 3, .shuffle = false, .drop_last = true});
  EXPECT_EQ(cut.size(), 2);
  EXPECT_EQ(cut.indices(0), (std::vector<int64_t>{3, 7}));
  // A dataset smaller than the world still gives every rank one index.
  EXPECT_EQ(DistributedSampler(2, {.num_replicas = 3, .rank = 2, .shuffle = false}).indices(0),
            (std::vector<int64_t>{0}));
}

TEST(DistributedSampler, ChecksAGivenRank) {
  EXPECT_THAT(testing::error_message<ValueError>(
                  [] { DistributedSampler(8, {.num_replicas = 2, .rank = 2}); }),
              ::testing::HasSubstr("rank 2 is not in [0, 2)"));
}

// Each launcher's variables, as it sets them: a default sampler is that rank of that world and
// takes that rank's share (10 examples unshuffled: rank r of w takes r, r + w, ..., padded).
struct LaunchedBy {
  const char* name;
  std::vector<std::pair<const char*, const char*>> vars;
  int64_t rank, world;
};

void PrintTo(const LaunchedBy& l, std::ostream* os) { *os << l.name; }

class SamplerUnderALauncher : public ::testing::TestWithParam<LaunchedBy> {};

TEST_P(SamplerUnderALauncher, TakesThatRankAndWorldAndItsShare) {
  const LaunchedBy& l = GetParam();
  testing::LauncherVars clean{};
  for (auto [n, v] : l.vars) ::setenv(n, v, 1);  // restored with the rest by `clean`
  const DistributedSampler s(10, {.shuffle = false});
  EXPECT_EQ(s.rank(), l.rank);
  EXPECT_EQ(s.num_replicas(), l.world);
  std::vector<int64_t> want;
  for (int64_t i = l.rank; i < (10 + l.world - 1) / l.world * l.world; i += l.world)
    want.push_back(i % 10);
  EXPECT_EQ(s.indices(0), want);
}

INSTANTIATE_TEST_SUITE_P(
    Launchers, SamplerUnderALauncher,
    ::testing::Values(
        LaunchedBy{"torchrun", {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"}}, 2, 4},
        LaunchedBy{"OpenMPI",
                   {{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                   1,
                   2},
        LaunchedBy{"PMI", {{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "2"}}, 2, 3},
        LaunchedBy{"Slurm",
                   {{"SLURM_PROCID", "3"},
                    {"SLURM_NTASKS", "4"},
                    {"SLURM_LOCALID", "1"},
                    {"SLURM_NTASKS_PER_NODE", "2"}},
                   3,
                   4},
        // mpirun in a Slurm allocation: Slurm's batch step (rank 0 of 8) is in every rank's
        // environment too, and mpirun's variables win, all of them.
        LaunchedBy{"OpenMPIInsideSlurm",
                   {{"OMPI_COMM_WORLD_RANK", "1"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"SLURM_PROCID", "0"},
                    {"SLURM_NTASKS", "8"}},
                   1,
                   2},
        LaunchedBy{"NoLauncher", {}, 0, 1}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(DistributedSampler, NeverTakesTheRankFromOneLauncherAndTheWorldFromAnother) {
  testing::LauncherVars vars{{"RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_NTASKS", "8"}};
  EXPECT_THAT(testing::error_message<ValueError>([] { DistributedSampler s(8); }),
              ::testing::HasSubstr("torchrun (RANK, WORLD_SIZE) sets no WORLD_SIZE"));
  // A given world size needs no variable for it.
  EXPECT_EQ(DistributedSampler(8, {.num_replicas = 2}).rank(), 1);
}

}  // namespace
}  // namespace tandem::data
