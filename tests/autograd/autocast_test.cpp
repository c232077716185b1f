// Autocast: each op list picks its dtype, gradients come back float32 on float32 parameters, a
// parameter is cast once per region, and the state follows work into other threads and into
// activation checkpointing's recomputation. The same on cuda:0 when there is one.
#include <tandem/nn/activation_checkpoint.h>
#include <thread>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;

namespace {

class Autocast : public ::testing::TestWithParam<DType> {};

TEST_P(Autocast, EachOpListPicksItsDType) {
  const DType low = GetParam();
  manual_seed(0);
  const Tensor x = randn({4, 3}), w = randn({5, 3}).requires_grad_(), b = randn({5});
  const Tensor img = randn({2, 1, 5, 5}), k = randn({2, 1, 3, 3}).requires_grad_();
  const Tensor half = x.to(low), x64 = x.to(kFloat64);
  const Tensor y = from_vector<int64_t>({0, 1, 2, 0}, {4});
  AutocastGuard autocast(DeviceType::CPU, low);
  // Lower precision: matmul, linear, conv2d.
  EXPECT_EQ(x.matmul(w.t()).dtype(), low);
  EXPECT_EQ(linear(x, w, b).dtype(), low);
  EXPECT_EQ(conv2d(img, k, Tensor(), {}).dtype(), low);
  // float32: softmax, log_softmax, the losses, sums, exp, log, pow.
  for (const Tensor& t :
       {half.softmax(1), half.log_softmax(1), half.sum(), half.mean(), half.exp(), abs(half).log(),
        half.pow(2.0), cross_entropy(half, y), mse_loss(half, half)})
    EXPECT_EQ(t.dtype(), kFloat32);
  // Promote: the widest input.
  EXPECT_EQ((half + x).dtype(), kFloat32);
  EXPECT_EQ((half * half).dtype(), low);
  EXPECT_EQ(cat({half, x}).dtype(), kFloat32);
  EXPECT_EQ(where(x.gt(0.0), half, x).dtype(), kFloat32);
  // Everything else keeps its input's dtype; float64 is never cast.
  EXPECT_EQ(half.relu().dtype(), low);
  EXPECT_EQ(x64.matmul(x64.t()).dtype(), kFloat64);
  EXPECT_EQ(x64.exp().dtype(), kFloat64);
}

TEST_P(Autocast, GradientsArriveInFloat32AndMatchFloat32Training) {
  const DType low = GetParam();
  manual_seed(1);
  nn::Linear l1(8, 16), l2(16, 4);
  const Tensor x = randn({32, 8});
  std::vector<int64_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 4);
  const Tensor y = from_vector<int64_t>(labels, {32});
  Tensor loss;
  {
    AutocastGuard autocast(DeviceType::CPU, low);
    loss = cross_entropy(l2(l1(x).relu()), y);
  }
  EXPECT_EQ(loss.dtype(), kFloat32);
  loss.backward();
  std::vector<Tensor> low_grads;
  for (const Tensor& p : {l1.weight, l1.bias, l2.weight, l2.bias}) {
    EXPECT_EQ(p.dtype(), kFloat32);
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), kFloat32);
    low_grads.push_back(p.grad());
    p.set_grad(Tensor());
  }
  cross_entropy(l2(l1(x).relu()), y).backward();  // the float32 reference
  const double tol = low == kBFloat16 ? 3e-2 : 4e-3;
  size_t i = 0;
  for (const Tensor& p : {l1.weight, l1.bias, l2.weight, l2.bias})
    EXPECT_TRUE(tandem::testing::all_close(low_grads[i++], p.grad(), tol, tol));
}

TEST_P(Autocast, AParameterIsCastOncePerRegion) {
  const DType low = GetParam();
  manual_seed(2);
  Tensor w = randn({4, 4}).requires_grad_();
  const Tensor x = randn({2, 4});
  {
    AutocastGuard autocast(DeviceType::CPU, low);
    const Tensor h = x.matmul(w);
    const Tensor out = h.matmul(w).matmul(w);  // three uses of w
    EXPECT_EQ(autocast::cached_casts(), 1u);
    {
      AutocastGuard nested(DeviceType::CPU, low);  // a nested region shares the cache
      x.matmul(w);
      EXPECT_EQ(autocast::cached_casts(), 1u);
    }
    out.sum().backward();  // the three uses' gradients meet in the one cast
    EXPECT_EQ(w.grad().dtype(), kFloat32);
    // The cached cast serves separate backward calls too (a pipeline's micro-batches).
    x.matmul(w).sum().backward();
    EXPECT_EQ(autocast::cached_casts(), 1u);
    {
      NoGradGuard no_grad;
      w.add_(1.0);  // changed in place: the cache casts it again
    }
    x.matmul(w);
    EXPECT_EQ(autocast::cached_casts(), 2u);
    x.to(low).matmul(x.to(low).t());  // not parameters: never cached
    EXPECT_EQ(autocast::cached_casts(), 2u);
  }
  EXPECT_EQ(autocast::cached_casts(), 0u) << "the region's end drops its cache";
  AutocastGuard again(DeviceType::CPU, low);
  x.matmul(w);
  EXPECT_EQ(autocast::cached_casts(), 1u) << "a new region casts afresh";
}

TEST_P(Autocast, FollowsWorkIntoThreadsAndCheckpointRecomputation) {
  const DType low = GetParam();
  manual_seed(3);
  const Tensor x = randn({3, 4}).requires_grad_(), w = randn({4, 4}).requires_grad_();
  AutocastGuard autocast(DeviceType::CPU, low);
  const ThreadLocalState state = ThreadLocalState::capture();
  DType in_thread = kFloat32;
  std::thread([&] {
    EXPECT_FALSE(autocast::is_enabled(DeviceType::CPU)) << "a new thread starts without it";
    ThreadLocalStateGuard guard(state);
    in_thread = x.matmul(w).dtype();
  }).join();
  EXPECT_EQ(in_thread, low);
  // Recomputation in backward runs under the forward's autocast, so it rebuilds the same graph.
  DType recomputed = kFloat32;
  Tensor out = nn::activation_checkpoint(
      [&](const Tensor& v) {
        const Tensor h = v.matmul(w);
        recomputed = h.dtype();
        return h.relu();
      },
      x);
  recomputed = kFloat32;
  {
    AutocastGuard off(DeviceType::CPU, low, /*enabled=*/false);
    EXPECT_EQ(x.matmul(w).dtype(), kFloat32);
    out.to(kFloat32).sum().backward();  // backward outside autocast, as recommended
  }
  EXPECT_EQ(recomputed, low);
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
}

TEST_P(Autocast, OnCuda0) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const DType low = GetParam();
  const Tensor x = randn({4, 3}).to(Device::cuda(0)), w = randn({5, 3}).to(Device::cuda(0));
  AutocastGuard autocast(DeviceType::CUDA, low);
  EXPECT_EQ(linear(x, w, Tensor()).dtype(), low);
  EXPECT_EQ(linear(x, w, Tensor()).softmax(1).dtype(), kFloat32);
  EXPECT_EQ(x.to(Device::cpu()).matmul(w.to(Device::cpu()).t()).dtype(), kFloat32)
      << "autocast is per device type";
}

INSTANTIATE_TEST_SUITE_P(Formats, Autocast, ::testing::Values(kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(name(info.param)); });

TEST(AutocastGuard, TakesOnlyA16BitType) {
  EXPECT_THAT(error_message<DTypeError>([] { AutocastGuard g(DeviceType::CPU, kFloat32); }),
              ::testing::HasSubstr("AutocastGuard: expected bfloat16 or float16, but got float32"));
}

}  // namespace
