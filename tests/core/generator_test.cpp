// The per-device Philox generator: seeding, state save/restore, and the distributions' moments.
#include <cmath>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

TEST(Generator, SameSeedSameNumbersAndStateRestores) {
  manual_seed(42);
  const std::vector<double> a = values(randn({100}));
  manual_seed(42);
  EXPECT_EQ(values(randn({100})), a);
  Generator& g = default_generator(Device::cpu());
  const GeneratorState saved = g.get_state();
  const std::vector<double> next = values(rand({50}));
  EXPECT_NE(values(rand({50})), next);
  g.set_state(saved);
  EXPECT_EQ(values(rand({50})), next);
}

TEST(Generator, EachDeviceHasItsOwnStream) {
  manual_seed(7);
  const std::vector<double> on0 = values(rand({20}));
  const std::vector<double> again0 = values(rand({20}));
  const std::vector<double> on1 = values(rand({20}, {.device = Device("cpu:1")}));
  EXPECT_EQ(on1, on0);  // same seed, untouched stream: the same first numbers
  EXPECT_NE(again0, on0);
}

TEST(Generator, UniformAndNormalMoments) {
  manual_seed(1);
  for (DType t : {kFloat32, kFloat64}) {
    Tensor u = rand({200000}, {.dtype = t});
    EXPECT_NEAR(u.mean().item(), 0.5, 0.005);
    EXPECT_GE(u.min().item(), 0.0);
    EXPECT_LT(u.max().item(), 1.0);
    Tensor n = randn({200000}, {.dtype = t});
    EXPECT_NEAR(n.mean().item(), 0.0, 0.01);
    EXPECT_NEAR((n * n).mean().item(), 1.0, 0.02);
    EXPECT_TRUE(std::isfinite(abs(n).max().item()));
  }
}
