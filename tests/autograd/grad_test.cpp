// autograd::grad: the gradients of an output with respect to chosen tensors (leaves or
// intermediate), equal to what backward accumulates, without writing .grad and without running
// the parts of the graph that lead elsewhere.
#include <tandem/autograd/engine.h>

#include "support/expect.h"

namespace tandem {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

TEST(AutogradGrad, MatchesBackwardForLeavesAndIntermediatesAndWritesNoGrad) {
  manual_seed(2);
  const Tensor x = randn({5, 4}, {.dtype = kFloat64}).requires_grad_();
  const Tensor w = randn({4, 3}, {.dtype = kFloat64}).requires_grad_();
  const Tensor h = x.matmul(w).tanh();
  const Tensor loss = (h * h).sum();
  const std::vector<Tensor> g = autograd::grad(loss, {w, h, x}, {.retain_graph = true});
  EXPECT_FALSE(w.grad().defined()) << "autograd::grad writes no .grad";
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(tandem::testing::all_close(g[1], h * 2.0, 0, 1e-15));  // d(sum h²)/dh = 2h
  loss.backward();
  EXPECT_TRUE(tandem::testing::all_close(g[0], w.grad(), 0, 0));
  EXPECT_TRUE(tandem::testing::all_close(g[2], x.grad(), 0, 0));
}

TEST(AutogradGrad, RunsOnlyThePartOfTheGraphThatLeadsToTheInputs) {
  const Tensor a = randn({3}).requires_grad_(), b = randn({3}).requires_grad_();
  const Tensor ha = a.exp(), hb = b.exp();
  int b_side = 0;
  hb.register_hook([&](const Tensor&) {
    ++b_side;
    return Tensor();
  });
  const Tensor loss = (ha * 2.0).sum() + (hb * 3.0).sum();
  const std::vector<Tensor> g = autograd::grad(loss, {a});
  EXPECT_TRUE(tandem::testing::all_close(g[0], a.exp() * 2.0, 1e-6, 1e-6));
  EXPECT_EQ(b_side, 0) << "b's branch leads to no input and must not run";
}

TEST(AutogradGrad, AnUnusedInputIsAnErrorUnlessAllowed) {
  const Tensor a = randn({3}).requires_grad_(), unused = randn({3}).requires_grad_();
  const Tensor loss = (a * a).sum();
  EXPECT_THAT(error_message<AutogradError>([&] {
                autograd::grad(loss, {a, unused}, {.retain_graph = true});
              }),
              HasSubstr("input 1"));
  const std::vector<Tensor> g = autograd::grad(loss, {a, unused}, {.allow_unused = true});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  EXPECT_THAT(error_message<AutogradError>([&] { autograd::grad((a * 2.0).sum(), {randn({3})}); }),
              HasSubstr("does not require grad"));
}

}  // namespace
}  // namespace tandem
