// WeightGradDeferral: Linear weight gradients put off during several backward passes and computed
// at flush() equal the ones backward computes itself (float64), hooks included; only leaf weights
// are deferred; autograd::grad never defers; the deferral follows backward into device threads.
#include <tandem/autograd/weight_grad_deferral.h>

#include "support/expect.h"

using namespace tandem;

namespace {

struct TwoLayers {
  Tensor w1, b1, w2, b2;
  explicit TwoLayers(Device d = Device::cpu()) {
    manual_seed(3);
    const TensorOptions o{.dtype = kFloat64, .device = d};
    w1 = randn({8, 5}, o).requires_grad_();
    b1 = randn({8}, o).requires_grad_();
    w2 = randn({3, 8}, o).requires_grad_();
    b2 = randn({3}, o).requires_grad_();
  }
  Tensor loss(const Tensor& x) const { return linear(tanh(linear(x, w1, b1)), w2, b2).sum(); }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
};

// Three "micro-batches" of different sizes, one backward each.
std::vector<Tensor> micro_batches(Device d = Device::cpu()) {
  manual_seed(5);
  return {randn({4, 5}, {.dtype = kFloat64, .device = d}),
          randn({7, 5}, {.dtype = kFloat64, .device = d}),
          randn({1, 5}, {.dtype = kFloat64, .device = d})};
}

std::vector<Tensor> grads_without_deferral(Device d = Device::cpu()) {
  TwoLayers m(d);
  for (const Tensor& x : micro_batches(d)) m.loss(x).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : m.params()) g.push_back(p.grad());
  return g;
}

TEST(WeightGradDeferral, FlushGivesTheGradientsBackwardWouldHave) {
  const std::vector<Tensor> expected = grads_without_deferral();
  TwoLayers m;
  auto deferral = std::make_shared<WeightGradDeferral>();
  {
    WeightGradDeferralGuard guard(deferral);
    for (const Tensor& x : micro_batches()) m.loss(x).backward();
  }
  EXPECT_EQ(deferral->pending(), 6u);  // 2 weights × 3 backward passes
  EXPECT_FALSE(m.w1.grad().defined());
  EXPECT_FALSE(m.w2.grad().defined());
  EXPECT_TRUE(m.b1.grad().defined());  // biases are not deferred
  deferral->flush();
  EXPECT_EQ(deferral->pending(), 0u);
  const std::vector<Tensor> params = m.params();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(tandem::testing::all_close(params[i].grad(), expected[i], 1e-12, 1e-12)) << i;
  // Flushing again adds nothing; a second round accumulates onto .grad as backward would.
  deferral->flush();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
}

TEST(WeightGradDeferral, ATiedWeightKeepsItsOtherGradients) {
  // w1 feeds a Linear (deferred) and an L2 term (computed in backward): both parts must arrive,
  // the second at backward, the first at flush.
  auto loss = [](const TwoLayers& m, const Tensor& x) {
    return m.loss(x) + (m.w1 * m.w1).sum() * 0.01;
  };
  TwoLayers expected_model;
  for (const Tensor& x : micro_batches()) loss(expected_model, x).backward();
  TwoLayers m;
  auto deferral = std::make_shared<WeightGradDeferral>();
  {
    WeightGradDeferralGuard guard(deferral);
    for (const Tensor& x : micro_batches()) loss(m, x).backward();
  }
  EXPECT_TRUE(m.w1.grad().defined());  // the L2 part, accumulated in backward
  deferral->flush();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected_model.w1.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), expected_model.w2.grad(), 1e-12, 1e-12));
}

TEST(WeightGradDeferral, HooksRunAtFlushOncePerWeight) {
  TwoLayers m;
  int tensor_hooks = 0, post_hooks = 0;
  m.w1.register_hook([&](const Tensor& g) {
    ++tensor_hooks;
    return g * 2.0;  // replaces the gradient, as in backward
  });
  m.w1.register_post_accumulate_grad_hook([&](const Tensor&) { ++post_hooks; });
  auto deferral = std::make_shared<WeightGradDeferral>();
  {
    WeightGradDeferralGuard guard(deferral);
    for (const Tensor& x : micro_batches()) m.loss(x).backward();
  }
  EXPECT_EQ(tensor_hooks, 0);
  deferral->flush();
  EXPECT_EQ(tensor_hooks, 1);
  EXPECT_EQ(post_hooks, 1);
  EXPECT_TRUE(
      tandem::testing::all_close(m.w1.grad(), grads_without_deferral()[0] * 2.0, 1e-12, 1e-12));
}

TEST(WeightGradDeferral, OnlyLeafWeightsAndNeverForAutogradGrad) {
  TwoLayers m;
  auto deferral = std::make_shared<WeightGradDeferral>();
  WeightGradDeferralGuard guard(deferral);
  // A weight computed from a leaf (as autocast's cast is) gets its gradient in backward.
  const Tensor x = micro_batches()[0];
  linear(x, m.w1 * 1.0, m.b1).sum().backward();
  EXPECT_EQ(deferral->pending(), 0u);
  EXPECT_TRUE(m.w1.grad().defined());
  // autograd::grad returns every gradient it is asked for.
  const std::vector<Tensor> g = autograd::grad(m.loss(x), {m.w1, m.w2});
  EXPECT_EQ(deferral->pending(), 0u);
  EXPECT_TRUE(g[0].defined() && g[1].defined());
}

TEST(WeightGradDeferral, FollowsBackwardIntoDeviceThreads) {
  // Nodes on cpu:1 run on cpu:1's backward thread: the deferral reaches it with the rest of the
  // caller's thread-local state.
  const Device d = Device::cpu(1);
  const std::vector<Tensor> expected = grads_without_deferral(d);
  TwoLayers m(d);
  auto deferral = std::make_shared<WeightGradDeferral>();
  {
    WeightGradDeferralGuard guard(deferral);
    for (const Tensor& x : micro_batches(d)) m.loss(x).backward();
  }
  EXPECT_EQ(deferral->pending(), 6u);
  deferral->flush();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), expected[2], 1e-12, 1e-12));
}

}  // namespace
