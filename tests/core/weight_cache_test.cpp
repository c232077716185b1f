// tests/core/weight_cache_test.cpp — the CPU GEMM's cache of packed weights
// (core/kernels/cpu/weight_cache.h): a weight multiplied a third time unchanged is packed once and
// the products stay right (against float64) and the same bits as unpacked; after a write, a weight
// used three times before is packed at its second use, one used twice never; a freed
// weight whose address comes back, and a weight used on a backward thread each behave as
// documented; transposed, small and float64 operands are never packed; off means off. On a CPU
// without AVX-512 oneDNN runs no float32 product and the tests that count packs skip, visibly.
#include <tandem/core/cpu_info.h>
#include <tandem/core/kernels/cpu/weight_cache.h>
#include <tandem/tandem.h>
#include <cmath>

#include "support/expect.h"

using namespace tandem;
using cpu::weight_cache_stats;

namespace {

// 512 × 1024: 2^19 elements, above the packing threshold (2^18).
constexpr int64_t kK = 512, kN = 1024;

// a·b in float32 against float64: entries are sums of kK unit-normal products.
void expect_product(const Tensor& a, const Tensor& b, const Tensor& got) {
  const Tensor ref = a.to(kFloat64).matmul(b.to(kFloat64));
  EXPECT_TRUE(
      tandem::testing::all_close(got.to(kFloat64), ref, 1e-5 * std::sqrt(double(kK)), 1e-5));
}

// Each test starts from an empty cache, and puts it back as it found it (on).
struct WeightCache : ::testing::Test {
  void SetUp() override {
    if (!cpu_info().avx512f)
      GTEST_SKIP() << "no AVX-512: float32 products run on OpenBLAS here, nothing to pack";
    cpu::clear_weight_cache();
  }
  void TearDown() override {
    cpu::set_weight_cache_enabled(true);
    cpu::clear_weight_cache();
  }
};

TEST_F(WeightCache, PacksOnTheThirdUseAndKeepsTheProductsRight) {
  manual_seed(3);
  const Tensor w = randn({kK, kN});
  for (int i = 0; i < 5; ++i) {
    const Tensor a = randn({64 + i, kK});  // micro-batches of different sizes share the copy
    expect_product(a, w, a.matmul(w));
    EXPECT_EQ(weight_cache_stats().packs, i < 2 ? 0 : 1) << "use " << i;
  }
  EXPECT_EQ(weight_cache_stats().bytes, size_t(kK * kN * 4));
}

// oneDNN's blocked layout for the weight depends on the weight, not on how many rows multiply it
// (nor on the row blocks a product is split into over threads): one copy serves every micro-batch.
TEST_F(WeightCache, OneCopyServesEveryRowCountAndThreadCount) {
  manual_seed(9);
  const Tensor w = randn({kK, kN});
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    cpu::clear_weight_cache();
    for (int64_t rows : {64, 16, 17, 63, 128, 33}) {
      const Tensor a = randn({rows, kK});
      expect_product(a, w, a.matmul(w));
    }
    EXPECT_EQ(weight_cache_stats().packs, 1) << threads << " thread(s)";
  }
  set_num_threads(saved);
}

// The packed kernel's sums against the plain one's: the same summation, the same bits.
TEST_F(WeightCache, PackedProductsAreTheSameBitsAsThePlainOnes) {
  manual_seed(10);
  const Tensor w = randn({kK, kN}), a = randn({64, kK});
  const Tensor plain = a.matmul(w);
  (void)a.matmul(w);
  const Tensor packed = a.matmul(w);
  ASSERT_EQ(weight_cache_stats().packs, 1);
  EXPECT_TRUE(tandem::testing::all_close(packed, plain, 0, 0));
}

TEST_F(WeightCache, AWriteToTheWeightRepacksIt) {
  manual_seed(4);
  Tensor w = randn({kK, kN});
  const Tensor a = randn({64, kK});
  for (int i = 0; i < 3; ++i) (void)a.matmul(w);
  ASSERT_EQ(weight_cache_stats().packs, 1);
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // bumps the version: the copy is stale
  }
  expect_product(a, w, a.matmul(w));  // a first use again: read as it is
  EXPECT_EQ(weight_cache_stats().packs, 1);
  // Used three times at its last version: packed again at the second use, from the new values.
  expect_product(a, w, a.matmul(w));
  EXPECT_EQ(weight_cache_stats().packs, 2);
  EXPECT_EQ(weight_cache_stats().bytes, size_t(kK * kN * 4)) << "the stale copy's memory is reused";
}

TEST_F(WeightCache, AFreedWeightIsNotMistakenForANewOne) {
  manual_seed(6);
  const Tensor a = randn({64, kK});
  for (int round = 0; round < 3; ++round) {
    // Same shape, same version (0), and quite possibly the same address as the last round's.
    const Tensor w = randn({kK, kN});
    for (int i = 0; i < 4; ++i) expect_product(a, w, a.matmul(w));
  }
  EXPECT_EQ(weight_cache_stats().packs, 3);
}

TEST_F(WeightCache, OnlyPlainLargeFloat32OperandsArePacked) {
  manual_seed(7);
  const Tensor a = randn({64, kK});
  const Tensor wt = randn({kN, kK});                // used transposed, as a forward's x·Wᵀ
  const Tensor small = randn({kK, 256});            // 2^17 elements
  const Tensor w64 = randn({kK, kN}).to(kFloat64);  // float64 never goes to oneDNN
  for (int i = 0; i < 4; ++i) {
    expect_product(a, wt.t(), a.matmul(wt.t()));
    expect_product(a, small, a.matmul(small));
    (void)a.to(kFloat64).matmul(w64);
  }
  EXPECT_EQ(weight_cache_stats().packs, 0);
}

TEST_F(WeightCache, TurnedOffNothingIsPacked) {
  cpu::set_weight_cache_enabled(false);
  const Tensor w = randn({kK, kN}), a = randn({64, kK});
  for (int i = 0; i < 4; ++i) expect_product(a, w, a.matmul(w));
  EXPECT_EQ(weight_cache_stats().packs, 0);
  EXPECT_EQ(weight_cache_stats().entries, 0u);
}

// One dy·W per weight per step, as ordinary training does: counted, never packed.
TEST_F(WeightCache, AWeightThatChangesEveryStepIsNeverPacked) {
  manual_seed(2);
  Tensor w = randn({kK, kN});
  const Tensor a = randn({64, kK});
  for (int step = 0; step < 5; ++step) {
    (void)a.matmul(w);
    NoGradGuard no_grad;
    w.add_(0.01);  // the optimizer's update
  }
  EXPECT_EQ(weight_cache_stats().packs, 0);
  EXPECT_EQ(weight_cache_stats().bytes, 0u);
}

// Two uses per step (a pipeline of two micro-batches): packing would cost a pass for one faster
// product, so it never happens.
TEST_F(WeightCache, AWeightUsedTwicePerStepIsNeverPacked) {
  manual_seed(12);
  Tensor w = randn({kK, kN});
  const Tensor a = randn({64, kK});
  for (int step = 0; step < 4; ++step) {
    for (int i = 0; i < 2; ++i) expect_product(a, w, a.matmul(w));
    NoGradGuard no_grad;
    w.add_(0.01);
  }
  EXPECT_EQ(weight_cache_stats().packs, 0);
}

TEST_F(WeightCache, WorksOnTheBackwardThreadOfAnotherDevice) {
  manual_seed(8);
  // linear's backward computes dx = dy·W with W plain: on cpu:1, by that device's backward thread.
  const Tensor w = randn({kN, kK}, {.device = Device::cpu(1), .requires_grad = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({64, kK}, {.device = Device::cpu(1), .requires_grad = true});
    linear(x, w, Tensor()).sum().backward();
    // dx = ones·W: every row the column sums of W.
    const Tensor expected = w.detach().to(kFloat64).sum({0}).expand({64, kK});
    EXPECT_TRUE(tandem::testing::all_close(x.grad().to(kFloat64), expected, 1e-3, 1e-5));
  }
  EXPECT_EQ(weight_cache_stats().packs, 1);
}

}  // namespace
