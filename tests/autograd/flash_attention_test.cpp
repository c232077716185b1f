// tests/autograd/flash_attention_test.cpp — the tensor-core attention (AttentionBackend::Flash,
// core/kernels/cuda/flash_attention.cu) on cuda:0 against the CPU's fused kernel in float32, both
// from the same 16-bit inputs: the output and all three gradients within 16-bit rounding, for head
// dims 32, 64 and 128, lengths inside one 64-row tile and across several with ragged ends, Tq ≠
// Tk, causal or not, bool and float masks, and dropout drawn from the same counters; then the same
// bits on a second run. Skipped, visibly, without a GPU. On every machine: what Flash refuses and
// why, and that Auto takes it only once enabled, and only on CUDA.
#include "support/flash_cases.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace flash_attention_test {

using tandem::testing::flash::Case;
namespace flash = tandem::testing::flash;

class FlashAttentionCuda : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_P(FlashAttentionCuda, MatchesTheCpuInFloat32) {
  const Case& c = GetParam();
  const flash::Inputs in = flash::draw(c);
  flash::expect_close(c, flash::run(c, in, Device::cuda(0), c.dtype, AttentionBackend::Flash),
                      flash::reference(c, in));
}

TEST_P(FlashAttentionCuda, GivesTheSameBitsEveryRun) {
  const Case& c = GetParam();
  const flash::Inputs in = flash::draw(c);
  const auto first = flash::run(c, in, Device::cuda(0), c.dtype, AttentionBackend::Flash);
  const auto second = flash::run(c, in, Device::cuda(0), c.dtype, AttentionBackend::Flash);
  for (size_t i = 0; i < first.size(); ++i)
    EXPECT_TRUE(all_close(first[i], second[i], 0, 0)) << c.name << ": output " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionCuda, ::testing::ValuesIn(flash::cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace flash_attention_test

namespace {

TEST(FlashAttention, SaysWhatItCannotTake) {
  EXPECT_EQ(flash_attention_unsupported(kBFloat16, 64, 64), nullptr);
  EXPECT_EQ(flash_attention_unsupported(kFloat16, 128, 128), nullptr);
  EXPECT_THAT(flash_attention_unsupported(kFloat32, 64, 64), HasSubstr("bfloat16 or float16"));
  EXPECT_THAT(flash_attention_unsupported(kBFloat16, 64, 32), HasSubstr("value's head dim"));
  EXPECT_THAT(flash_attention_unsupported(kBFloat16, 80, 80), HasSubstr("32, 64 or 128"));
}

TEST(FlashAttention, ExplicitlyOnTheCpuIsADeviceErrorNamingTheQuery) {
  const Tensor q = randn({1, 4, 64}).to(kBFloat16);
  const std::string msg = error_message<DeviceError>(
      [&] { scaled_dot_product_attention(q, q, q, {.backend = AttentionBackend::Flash}); });
  EXPECT_THAT(msg, HasSubstr("runs on CUDA"));
  EXPECT_THAT(msg, HasSubstr("bfloat16"));
}

// Enabling Flash changes nothing where it does not apply: on the CPU, Auto still takes the fused
// kernel, bit for bit.
TEST(FlashAttention, IsOffByDefaultAndAutoTakesItOnlyOnCuda) {
  EXPECT_FALSE(flash_attention_enabled());
  manual_seed(5);
  const Tensor q = randn({2, 9, 64}).to(kBFloat16), k = randn({2, 9, 64}).to(kBFloat16);
  const Tensor before = scaled_dot_product_attention(q, k, k, {.causal = true});
  enable_flash_attention(true);
  const Tensor after = scaled_dot_product_attention(q, k, k, {.causal = true});
  enable_flash_attention(false);
  EXPECT_TRUE(all_close(after, before, 0, 0));
}

}  // namespace
