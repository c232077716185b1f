// tests/core/float16_test.cpp — the 16-bit floating types: conversions round to nearest, ties to
// even, through ties, overflow, subnormals, NaN and inf; every 16-bit pattern survives a trip
// through float; a million float patterns convert to the same bits as Eigen's bfloat16 and half;
// tensors of both dtypes (factories, to(dtype) with its gradient, item, printing, errors from ops
// that have no 16-bit kernels yet), and the same conversions on cuda:0 when there is one.
#include <tandem/core/cuda_device.h>
#include <tandem/tandem.h>
#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "support/expect.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;

uint16_t bf16(float f) { return BFloat16(f).bits; }
uint16_t f16(float f) { return Float16(f).bits; }
float two_to(int e) { return std::ldexp(1.0f, e); }

TEST(Float16, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16(1 + two_to(-8)), 0x3f80) << "a tie goes to the even neighbour, 1";
  EXPECT_EQ(bf16(1 + 3 * two_to(-8)), 0x3f82) << "a tie goes to the even neighbour, 1 + 2^-6";
  EXPECT_EQ(bf16(1 + two_to(-8) + two_to(-20)), 0x3f81) << "above the tie rounds up";
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()), 0x7f80) << "rounds up to inf";
  EXPECT_EQ(bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16(std::numeric_limits<float>::denorm_min() * 65536), 0x0001) << "subnormal";
  EXPECT_TRUE(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the dropped bits stays NaN instead of becoming inf.
  EXPECT_TRUE(std::isnan(float(BFloat16(std::bit_cast<float>(0x7f800001u)))));
  EXPECT_EQ(float(BFloat16::from_bits(0x3f81)), 1 + two_to(-7));
}

TEST(Float16, Float16RoundsToNearestEven) {
  EXPECT_EQ(f16(1.0f), 0x3c00);
  EXPECT_EQ(f16(65504.0f), 0x7bff) << "the largest float16";
  EXPECT_EQ(f16(65519.0f), 0x7bff) << "below the tie with 65536";
  EXPECT_EQ(f16(65520.0f), 0x7c00) << "the tie rounds to even: inf";
  EXPECT_EQ(f16(1 + two_to(-11)), 0x3c00) << "a tie goes to the even neighbour, 1";
  EXPECT_EQ(f16(1 + 3 * two_to(-11)), 0x3c02) << "a tie goes to the even neighbour, 1 + 2^-9";
  EXPECT_EQ(f16(two_to(-24)), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(f16(two_to(-25)), 0x0000) << "half the smallest subnormal: a tie, to even 0";
  EXPECT_EQ(f16(1.5f * two_to(-25)), 0x0001);
  EXPECT_EQ(f16(two_to(-14) - two_to(-24)), 0x03ff) << "the largest subnormal";
  EXPECT_EQ(f16(-0.0f), 0x8000);
  EXPECT_EQ(f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00) << "a quiet NaN";
  EXPECT_EQ(float(Float16::from_bits(0x0001)), two_to(-24));
  EXPECT_EQ(float(Float16::from_bits(0xfbff)), -65504.0f);
  EXPECT_EQ(float(Float16(BFloat16(0.5f))), 0.5f) << "one 16-bit type from the other";
}

TEST(Float16, EveryPatternSurvivesATripThroughFloat) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float x = float(Float16::from_bits(uint16_t(b))),
                y = float(BFloat16::from_bits(uint16_t(b)));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(float(Float16(x)))) << b;
    } else {
      ASSERT_EQ(f16(x), b) << "float16 " << b;
    }
    if (std::isnan(y)) {
      EXPECT_TRUE(std::isnan(float(BFloat16(y)))) << b;
    } else {
      ASSERT_EQ(bf16(y), b) << "bfloat16 " << b;
    }
  }
}

TEST(Float16, SameBitsAsEigen) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1'000'000; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(bf16(f), std::bit_cast<uint16_t>(Eigen::bfloat16(f))) << f;
    ASSERT_EQ(f16(f), std::bit_cast<uint16_t>(Eigen::half(f))) << f;
  }
}

TEST(Float16, Tensors) {
  for (DType t : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(name(t));
    EXPECT_TRUE(is_floating(t));
    EXPECT_EQ(element_size(t), 2u);
    EXPECT_EQ(accumulate_dtype(t), kFloat32);
    const Tensor x = from_vector<float>({1.0f, 1 + two_to(-12), -3.5f, 1e-3f}, {4}).to(t);
    EXPECT_EQ(x.dtype(), t);
    EXPECT_EQ(x.nbytes(), 8u);
    const std::vector<float> back = x.to(kFloat32).to_vector<float>();
    const float rounded = t == kBFloat16 ? float(BFloat16(1e-3f)) : float(Float16(1e-3f));
    EXPECT_EQ(back, (std::vector<float>{1.0f, 1.0f, -3.5f, rounded}));
    EXPECT_EQ(full({2}, 0.1, {.dtype = t}).to(kFloat64).to_vector<double>()[1],
              double(t == kBFloat16 ? float(BFloat16(0.1)) : float(Float16(0.1))));
    EXPECT_EQ(ones({3}, {.dtype = t}).to(kFloat32).sum().item(), 3.0);
    EXPECT_EQ(scalar_tensor(-2.5, {.dtype = t}).item(), -2.5);
    // Random and range factories draw in float32 and round: the same stream as float32's.
    manual_seed(4);
    const Tensor r32 = randn({64});
    manual_seed(4);
    const Tensor r16 = randn({64}, {.dtype = t});
    EXPECT_EQ(r16.dtype(), t);
    EXPECT_EQ(r16.to_vector<double>(), r32.to(t).to_vector<double>());
    EXPECT_EQ(arange(0, 5, 1, {.dtype = t}).to_vector<double>(),
              (std::vector<double>{0, 1, 2, 3, 4}));
    EXPECT_EQ(from_vector<int64_t>({3, -7}, {2}).to(t).to(kInt64).to_vector<int64_t>(),
              (std::vector<int64_t>{3, -7}));
    const Tensor exact = from_vector<float>({1.0f, -3.5f, 0.5f, 96.0f}, {4}).to(t);
    EXPECT_EQ(exact.to(t == kBFloat16 ? kFloat16 : kBFloat16).to(t).to_vector<double>(),
              (std::vector<double>{1.0, -3.5, 0.5, 96.0}))
        << "one 16-bit type straight to the other";
    std::ostringstream printed;
    printed << x;
    EXPECT_THAT(printed.str(), HasSubstr(str("dtype=", name(t))));
    // Arithmetic runs in float32 and rounds once (the op table's rows are in
    // autograd/low_precision_test.cpp).
    const Tensor v = from_vector<float>({-1.0f, 0.1f}, {2}).to(t);
    const Tensor y = relu(v);
    EXPECT_EQ(y.dtype(), t);
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0.0, v.to_vector<double>()[1]}));
  }
}

TEST(Float16, ToDTypeIsDifferentiable) {
  const Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f}, {3}).requires_grad_();
  const Tensor w = from_vector<float>({0.1f, 1 + two_to(-10), -4.0f}, {3});
  (x.to(kBFloat16).to(kFloat32) * w).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), kFloat32) << "the gradient has the parameter's dtype";
  // Backward casts the gradient to bfloat16 and back, so it arrives rounded.
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{float(BFloat16(0.1f)), 1.0f, -4.0f}));
}

TEST(Float16Cuda, ConversionsOnCuda0MatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  std::mt19937 rng(3);
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) {
    const float f = std::bit_cast<float>(uint32_t(rng()));
    if (!std::isnan(f)) values.push_back(f);
  }
  const Tensor x = from_vector<float>(values, {int64_t(values.size())});
  for (DType t : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(name(t));
    const Tensor gpu = x.to(Device::cuda(0)).to(t);
    EXPECT_EQ(gpu.to(Device()).to(kFloat32).to_vector<float>(),
              x.to(t).to(kFloat32).to_vector<float>());
    EXPECT_EQ(gpu.to(kFloat64).to(Device()).to_vector<double>(), x.to(t).to_vector<double>());
  }
}

}  // namespace
}  // namespace tandem
