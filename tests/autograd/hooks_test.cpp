// Hooks: tensor hooks modify gradients; post-accumulate hooks on leaves fire after .grad is
// written, once per backward, last layer first (the order DDP's buckets rely on).
#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

TEST(Hooks, TensorHookCanReplaceTheGradient) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor h = x * 3.0;
  std::vector<double> seen;
  h.register_hook([&](const Tensor& g) {
    seen = values(g);
    return g * 2.0;
  });
  h.sum().backward();
  EXPECT_EQ(seen, (std::vector<double>{1, 1}));
  EXPECT_EQ(values(x.grad()), (std::vector<double>{6, 6}));
}

TEST(Hooks, LeafHookRunsBeforeAccumulation) {
  Tensor x = tensor({1, 2}).requires_grad_();
  x.register_hook([](const Tensor& g) { return g * 10.0; });
  (x * x).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{20, 40}));
  EXPECT_THROW(ones({1}).register_hook([](const Tensor& g) { return g; }), AutogradError);
}

TEST(Hooks, PostAccumulateHooksFireLastLayerFirst) {
  manual_seed(0);
  Tensor w1 = randn({8, 4}).requires_grad_(), w2 = randn({3, 8}).requires_grad_();
  std::vector<std::string> order;
  std::vector<double> w2_grad_seen;
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w1"); });
  w2.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("w2");
    w2_grad_seen = values(p.grad());  // .grad is already written when the hook runs
  });
  Tensor x = randn({5, 4});
  for (int step = 0; step < 2; ++step) {
    x.matmul(w1.t()).relu().matmul(w2.t()).sum().backward();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1", "w2", "w1"}));
  EXPECT_EQ(w2_grad_seen, values(w2.grad()));
  EXPECT_THROW((w1 * 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}), AutogradError);
}

TEST(Hooks, RetainGradKeepsANonLeafGradient) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor h = x * x;
  h.retain_grad();
  (h * 3.0).sum().backward();
  EXPECT_EQ(values(h.grad()), (std::vector<double>{3, 3}));
}
