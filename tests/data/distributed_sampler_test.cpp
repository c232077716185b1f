// tests/data/distributed_sampler_test.cpp — ranks' shares are disjoint, equal and cover the
// epoch's permutation; set_epoch reshuffles; padding and drop_last behave as PyTorch's.
#include <tandem/data/distributed_sampler.h>
#include <tandem/data/sampler.h>

#include <algorithm>
#include <set>

#include "support/expect.h"

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

TEST(DistributedSampler, ReadsRankAndWorldFromTheEnvironmentAndChecksThem) {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "2", 1);
  DistributedSampler s(8);
  EXPECT_EQ(s.num_replicas(), 4);
  EXPECT_EQ(s.rank(), 2);
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("RANK");
  EXPECT_THAT(testing::error_message<ValueError>(
                  [] { DistributedSampler(8, {.num_replicas = 2, .rank = 2}); }),
              ::testing::HasSubstr("rank 2 is not in [0, 2)"));
}

}  // namespace
}  // namespace tandem::data
