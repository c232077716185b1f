// The GPT on cuda:0 against the CPU: the same small GPT (2 blocks, 2 heads, biases, tied lm_head)
// trained three steps with nanoGPT's recipe (AdamW with decay on matrices only, the global norm
// clipped to a value the first step exceeds) from the same weights and batches ends with the same
// parameters: float64 to 1e-9 relative (what differs is only the order of sums: cuBLAS, the fused
// attention kernel's reductions), float32 within the CUDA training test's 1e-4 + 1e-3·|x|. Under
// autocast (bfloat16, float16) on cuda:0 the first loss and gradients stay near float32's. The
// float32 tolerance is checked against float64 on the CPU everywhere, so a failure on the GPU is
// the GPU's. Skipped, visibly, without a GPU.
#include <optional>

#include "parallel/ddp_models.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;

namespace {

constexpr int64_t kBatch = 4, kT = 16, kVocab = 13;
constexpr double kClip = 0.05;

nn::GPTConfig config(DType dtype) {
  return {.block_size = kT,
          .vocab_size = kVocab,
          .n_layer = 2,
          .n_head = 2,
          .n_embd = 16,
          .dropout = 0.0,
          .bias = true,
          .tensor = {.dtype = dtype}};
}

// Step s's batch: ids and their next-token targets, [kBatch, kT] each.
std::pair<Tensor, Tensor> batch(int s) {
  std::vector<int64_t> ids;
  data::SplitMix64 rng(uint64_t(s + 11));
  for (int64_t i = 0; i < kBatch * (kT + 1); ++i) ids.push_back(int64_t(rng.next() % kVocab));
  const Tensor tokens = from_vector(ids, {kBatch, kT + 1});
  return {tokens.narrow(1, 0, kT).contiguous(), tokens.narrow(1, 1, kT).contiguous()};
}

// Three AdamW steps on `device`; every parameter afterwards, on the CPU in float64.
std::vector<Tensor> train(Device device, DType dtype) {
  manual_seed(5);
  nn::Sequential model = nn::gpt(config(dtype));
  model.to(device);
  optim::AdamW opt(optim::adamw_groups(
      model.named_parameters(), {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    nn::gpt_loss(model(x.to(device)), y.to(device)).backward();
    const double norm = optim::clip_grad_norm_(model.parameters(), kClip);
    if (s == 0) {
      EXPECT_GT(norm, kClip) << "the clip must act for the test to test it";
    }
    opt.step();
  }
  std::vector<Tensor> out;
  for (auto& [name, t] : model.named_parameters()) out.push_back(t.to(Device::cpu()).to(kFloat64));
  return out;
}

void expect_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], atol, rtol)) << what << ", parameter " << i;
}

class GPTCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_F(GPTCuda, ThreeAdamWStepsOnCuda0MatchTheCpuInFloat64) {
  expect_close(train(Device::cuda(0), kFloat64), train(Device::cpu(), kFloat64), 1e-12, 1e-9,
               "float64");
}

TEST_F(GPTCuda, ThreeAdamWStepsOnCuda0MatchTheCpuInFloat32) {
  expect_close(train(Device::cuda(0), kFloat32), train(Device::cpu(), kFloat32), 1e-4, 1e-3,
               "float32");
}

// One forward + backward under autocast on cuda:0 against float32 on the CPU: the loss within
// 2e-2 relative, every gradient within 5e-2 of the largest of its tensor (bfloat16 keeps 8 bits).
TEST_F(GPTCuda, AutocastOnCuda0StaysNearFloat32) {
  auto [x, y] = batch(0);
  auto run = [&, x = x, y = y](Device device, std::optional<DType> autocast) {
    manual_seed(5);
    nn::Sequential model = nn::gpt(config(kFloat32));
    model.to(device);
    Tensor loss;
    {
      std::optional<AutocastGuard> guard;
      if (autocast) guard.emplace(device.type(), *autocast);
      loss = nn::gpt_loss(model(x.to(device)), y.to(device));
    }
    EXPECT_EQ(loss.dtype(), kFloat32) << "autocast keeps the loss in float32";
    loss.backward();
    std::vector<Tensor> out{loss.detach().to(Device::cpu()).to(kFloat64)};
    for (auto& p : model.parameters()) out.push_back(p.grad().to(Device::cpu()).to(kFloat64));
    return out;
  };
  const std::vector<Tensor> want = run(Device::cpu(), std::nullopt);
  for (DType dtype : {kBFloat16, kFloat16}) {
    const std::vector<Tensor> got = run(Device::cuda(0), dtype);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(all_close(got[0], want[0], 0, 2e-2)) << dtype << ": the loss";
    for (size_t i = 1; i < want.size(); ++i) {
      const double scale = abs(want[i]).max().item();
      EXPECT_TRUE(all_close(got[i], want[i], 5e-2 * scale, 0)) << dtype << ", gradient " << i;
    }
  }
}

// The float32 tolerance above holds on the CPU between float32 and float64, so rounding alone
// cannot fail the float32 case on the GPU.
TEST(GPTCpu, Float32MatchesFloat64WithinTheCudaTolerance) {
  expect_close(train(Device::cpu(), kFloat32), train(Device::cpu(), kFloat64), 1e-4, 1e-3,
               "float32 against float64");
}

}  // namespace
