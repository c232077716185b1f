// Samplers and the splitmix64 shuffle under them: orders are permutations, fixed by (seed,
// epoch), different across epochs, and pinned to reference values computed independently (a
// few lines of Python), so a change to the shuffle cannot slip through.
#include <tandem/data/sampler.h>
#include <tandem/data/shuffle.h>

#include <algorithm>
#include <numeric>

#include "support/expect.h"

using namespace tandem;
using namespace tandem::data;

namespace {

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  std::vector<int64_t> expected(static_cast<size_t>(n));
  std::iota(expected.begin(), expected.end(), int64_t(0));
  return v == expected;
}

}  // namespace

TEST(SplitMix64, MatchesThePublishedSequenceForSeedZero) {
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ULL);
  EXPECT_EQ(rng.next(), 0x06C45D188009454FULL);
}

TEST(FisherYates, MatchesTheReferencePermutations) {
  EXPECT_EQ(random_permutation(10, 0), (std::vector<int64_t>{6, 3, 2, 9, 8, 1, 4, 7, 0, 5}));
  EXPECT_EQ(random_permutation(10, 1), (std::vector<int64_t>{4, 2, 8, 1, 9, 3, 0, 6, 7, 5}));
  EXPECT_EQ(RandomSampler(10, 42).indices(3), (std::vector<int64_t>{9, 6, 8, 2, 7, 0, 5, 1, 4, 3}));
}

TEST(SequentialSampler, VisitsEveryIndexInOrderEveryEpoch) {
  const SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices(0), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(s.indices(7), s.indices(0));
  EXPECT_TRUE(SequentialSampler(0).indices(0).empty());
}

TEST(RandomSampler, GivesAPermutationOfEveryIndex) {
  for (int64_t n : {0, 1, 2, 3, 1000}) {
    const RandomSampler s(n, 123);
    EXPECT_EQ(s.size(), n);
    for (int64_t epoch : {0, 1, 5}) EXPECT_TRUE(is_permutation_of_range(s.indices(epoch), n));
  }
}

TEST(RandomSampler, SameSeedAndEpochGiveTheSameOrder) {
  const RandomSampler a(500, 7), b(500, 7);
  EXPECT_EQ(a.indices(0), b.indices(0));
  EXPECT_EQ(a.indices(3), b.indices(3));
  EXPECT_EQ(a.indices(3), a.indices(3));  // asking again changes nothing
}

TEST(RandomSampler, EpochsAndSeedsGiveDifferentOrders) {
  const RandomSampler a(500, 7), b(500, 8);
  EXPECT_NE(a.indices(0), a.indices(1));
  EXPECT_NE(a.indices(1), a.indices(2));
  EXPECT_NE(a.indices(0), b.indices(0));
  // Seed and epoch are hashed separately: (seed 1, epoch 0) is not (seed 0, epoch 1).
  EXPECT_NE(RandomSampler(500, 1).indices(0), RandomSampler(500, 0).indices(1));
  EXPECT_NE(a.indices(0), SequentialSampler(500).indices(0));
}

TEST(RandomSampler, RejectsNegativeSizesAndEpochs) {
  EXPECT_THROW(RandomSampler(-1, 0), ValueError);
  EXPECT_THROW(SequentialSampler(-3), ValueError);
  EXPECT_THROW(RandomSampler(3, 0).indices(-1), ValueError);
}

TEST(RandomSampler, OrderDoesNotDependOnTheTensorGenerator) {
  const std::vector<int64_t> before = RandomSampler(100, 5).indices(0);
  manual_seed(999);
  (void)rand({10});
  EXPECT_EQ(RandomSampler(100, 5).indices(0), before);
}
