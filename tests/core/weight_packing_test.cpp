// tests/core/weight_packing_test.cpp — WeightPacking (core/weight_packing.h): a weight multiplied
// again in the same region is packed once and the products stay right (against float64); a write
// to it, a reset, a freed weight whose address comes back, and a weight used on a backward thread
// each behave as documented; transposed, small and float64 operands are never packed. On a CPU
// without AVX-512 oneDNN runs no float32 product and the tests that count packs skip, visibly.
#include <tandem/core/cpu_info.h>
#include <tandem/core/weight_packing.h>
#include <tandem/tandem.h>
#include <cmath>

#include "support/expect.h"

using namespace tandem;

namespace {

// 512 × 1024: 2^19 elements, above the packing threshold (2^18).
constexpr int64_t kK = 512, kN = 1024;

// a·b in float32 against float64: entries are sums of kK unit-normal products.
void expect_product(const Tensor& a, const Tensor& b, const Tensor& got) {
  const Tensor ref = a.to(kFloat64).matmul(b.to(kFloat64));
  EXPECT_TRUE(
      tandem::testing::all_close(got.to(kFloat64), ref, 1e-5 * std::sqrt(double(kK)), 1e-5));
}

#define SKIP_WITHOUT_AVX512() \
  if (!cpu_info().avx512f)    \
  GTEST_SKIP() << "no AVX-512: float32 products run on OpenBLAS here, nothing to pack"

TEST(WeightPacking, PacksOnTheSecondUseAndKeepsTheProductsRight) {
  SKIP_WITHOUT_AVX512();
  manual_seed(3);
  const Tensor w = randn({kK, kN});
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int i = 0; i < 4; ++i) {
    const Tensor a = randn({64 + i, kK});  // micro-batches of different sizes share the copy
    expect_product(a, w, a.matmul(w));
    EXPECT_EQ(packing->packs(), i == 0 ? 0 : 1) << "use " << i;
  }
  EXPECT_EQ(packing->bytes(), size_t(kK * kN * 4));
}

// oneDNN's blocked layout for the weight depends on the weight, not on how many rows multiply it
// (nor on the row blocks a product is split into over threads): one copy serves every micro-batch.
TEST(WeightPacking, OneCopyServesEveryRowCountAndThreadCount) {
  SKIP_WITHOUT_AVX512();
  manual_seed(9);
  const Tensor w = randn({kK, kN});
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    auto packing = std::make_shared<WeightPacking>();
    WeightPackingGuard guard(packing);
    for (int64_t rows : {64, 16, 17, 63, 128, 33}) {
      const Tensor a = randn({rows, kK});
      expect_product(a, w, a.matmul(w));
    }
    EXPECT_EQ(packing->packs(), 1) << threads << " thread(s)";
  }
  set_num_threads(saved);
}

// Against the same products without packing: how far the packed kernel's sums are from the
// plain one's (checked exactly where it is the same summation).
TEST(WeightPacking, PackedProductsMatchThePlainOnes) {
  SKIP_WITHOUT_AVX512();
  manual_seed(10);
  const Tensor w = randn({kK, kN}), a = randn({64, kK});
  const Tensor plain = a.matmul(w);
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  (void)a.matmul(w);
  const Tensor packed = a.matmul(w);
  ASSERT_EQ(packing->packs(), 1);
  EXPECT_TRUE(tandem::testing::all_close(packed, plain, 0, 0));
}

TEST(WeightPacking, AWriteToTheWeightRepacksIt) {
  SKIP_WITHOUT_AVX512();
  manual_seed(4);
  Tensor w = randn({kK, kN});
  const Tensor a = randn({64, kK});
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int i = 0; i < 2; ++i) (void)a.matmul(w);
  ASSERT_EQ(packing->packs(), 1);
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // bumps the version: the copy is stale
  }
  expect_product(a, w, a.matmul(w));  // a first use again: read as it is
  expect_product(a, w, a.matmul(w));  // packed again, from the new values
  EXPECT_EQ(packing->packs(), 2);
  EXPECT_EQ(packing->bytes(), size_t(kK * kN * 4)) << "the stale copy's memory is reused";
}

TEST(WeightPacking, ResetForgetsTheCopiesButKeepsTheirMemory) {
  SKIP_WITHOUT_AVX512();
  manual_seed(5);
  const Tensor w = randn({kK, kN}), a = randn({32, kK});
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int i = 0; i < 2; ++i) (void)a.matmul(w);
  packing->reset();
  expect_product(a, w, a.matmul(w));
  EXPECT_EQ(packing->packs(), 1) << "after reset the next use is a first one";
  expect_product(a, w, a.matmul(w));
  EXPECT_EQ(packing->packs(), 2);
  EXPECT_EQ(packing->bytes(), size_t(kK * kN * 4));
}

TEST(WeightPacking, AFreedWeightIsNotMistakenForANewOne) {
  SKIP_WITHOUT_AVX512();
  manual_seed(6);
  const Tensor a = randn({64, kK});
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int round = 0; round < 3; ++round) {
    // Same shape, same version (0), and quite possibly the same address as the last round's.
    const Tensor w = randn({kK, kN});
    for (int i = 0; i < 3; ++i) expect_product(a, w, a.matmul(w));
  }
  EXPECT_EQ(packing->packs(), 3);
}

TEST(WeightPacking, OnlyPlainLargeFloat32OperandsArePacked) {
  SKIP_WITHOUT_AVX512();
  manual_seed(7);
  const Tensor a = randn({64, kK});
  const Tensor wt = randn({kN, kK});                // used transposed, as a forward's x·Wᵀ
  const Tensor small = randn({kK, 256});            // 2^17 elements
  const Tensor w64 = randn({kK, kN}).to(kFloat64);  // float64 never goes to oneDNN
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int i = 0; i < 3; ++i) {
    expect_product(a, wt.t(), a.matmul(wt.t()));
    expect_product(a, small, a.matmul(small));
    (void)a.to(kFloat64).matmul(w64);
  }
  EXPECT_EQ(packing->packs(), 0);
}

TEST(WeightPacking, NothingIsPackedWithoutOne) {
  SKIP_WITHOUT_AVX512();
  ASSERT_EQ(WeightPacking::current(), nullptr);
  auto packing = std::make_shared<WeightPacking>();
  {
    WeightPackingGuard guard(packing);
    EXPECT_EQ(WeightPacking::current(), packing);
  }
  EXPECT_EQ(WeightPacking::current(), nullptr);
  const Tensor w = randn({kK, kN}), a = randn({64, kK});
  for (int i = 0; i < 3; ++i) (void)a.matmul(w);
  EXPECT_EQ(packing->packs(), 0);
}

TEST(WeightPacking, FollowsIntoTheBackwardThreadOfAnotherDevice) {
  SKIP_WITHOUT_AVX512();
  manual_seed(8);
  // linear's backward computes dx = dy·W with W plain: on cpu:1, by that device's backward thread.
  const Tensor w = randn({kN, kK}, {.device = Device::cpu(1), .requires_grad = true});
  auto packing = std::make_shared<WeightPacking>();
  WeightPackingGuard guard(packing);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({64, kK}, {.device = Device::cpu(1), .requires_grad = true});
    linear(x, w, Tensor()).sum().backward();
    // dx = ones·W: every row the column sums of W.
    const Tensor expected = w.detach().to(kFloat64).sum({0}).expand({64, kK});
    EXPECT_TRUE(tandem::testing::all_close(x.grad().to(kFloat64), expected, 1e-3, 1e-5));
  }
  EXPECT_EQ(packing->packs(), 1);
}

}  // namespace
