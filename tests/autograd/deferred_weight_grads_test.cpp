// Deferred weight gradients (autograd::backward with defer_weight_grads): Linear weight gradients
// put off during several backward passes and computed by run() equal the ones backward computes
// itself (float64), hooks included; only leaf weights are deferred; a plain backward and
// autograd::grad never defer; nodes on other devices' threads defer into the same task; the
// backward's callbacks wait for run(); an op that forgets a gradient is an error either way.
#include <tandem/autograd/engine.h>
#include <tandem/autograd/record.h>

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

// Every micro-batch's backward with its weight gradients put off, collected in one list.
autograd::DeferredWeightGrads deferred_backward(const std::vector<Tensor>& losses) {
  autograd::DeferredWeightGrads w;
  for (const Tensor& l : losses) w.append(autograd::backward(l, {.defer_weight_grads = true}));
  return w;
}

std::vector<Tensor> losses(const TwoLayers& m, Device d = Device::cpu()) {
  std::vector<Tensor> out;
  for (const Tensor& x : micro_batches(d)) out.push_back(m.loss(x));
  return out;
}

TEST(DeferredWeightGrads, RunGivesTheGradientsBackwardWouldHave) {
  const std::vector<Tensor> expected = grads_without_deferral();
  TwoLayers m;
  autograd::DeferredWeightGrads deferred = deferred_backward(losses(m));
  EXPECT_EQ(deferred.size(), 6u);  // 2 weights × 3 backward passes
  EXPECT_FALSE(m.w1.grad().defined());
  EXPECT_FALSE(m.w2.grad().defined());
  EXPECT_TRUE(m.b1.grad().defined());  // biases are not deferred
  deferred.run();
  EXPECT_EQ(deferred.size(), 0u);
  const std::vector<Tensor> params = m.params();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(tandem::testing::all_close(params[i].grad(), expected[i], 1e-12, 1e-12)) << i;
  // Running again adds nothing.
  deferred.run();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
}

TEST(DeferredWeightGrads, APlainBackwardDefersNothing) {
  const std::vector<Tensor> expected = grads_without_deferral();
  TwoLayers m;
  autograd::DeferredWeightGrads none;
  for (const Tensor& l : losses(m)) none.append(autograd::backward(l));
  EXPECT_TRUE(none.empty());
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
}

TEST(DeferredWeightGrads, ATiedWeightKeepsItsOtherGradients) {
  // w1 feeds a Linear and an L2 term: a weight with two gradients in one backward is not deferred
  // (its hooks would fire in backward and again in run()); w2 is.
  auto loss = [](const TwoLayers& m, const Tensor& x) {
    return m.loss(x) + (m.w1 * m.w1).sum() * 0.01;
  };
  TwoLayers expected_model;
  for (const Tensor& x : micro_batches()) loss(expected_model, x).backward();
  TwoLayers m;
  std::vector<Tensor> ls;
  for (const Tensor& x : micro_batches()) ls.push_back(loss(m, x));
  autograd::DeferredWeightGrads deferred = deferred_backward(ls);
  EXPECT_TRUE(m.w1.grad().defined());  // all of it, in backward
  EXPECT_EQ(deferred.size(), 3u);      // w2's, once per backward
  deferred.run();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected_model.w1.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), expected_model.w2.grad(), 1e-12, 1e-12));
}

TEST(DeferredWeightGrads, HooksRunInRunOncePerWeight) {
  TwoLayers m;
  int tensor_hooks = 0, post_hooks = 0;
  m.w1.register_hook([&](const Tensor& g) {
    ++tensor_hooks;
    return g * 2.0;  // replaces the gradient, as in backward
  });
  m.w1.register_post_accumulate_grad_hook([&](const Tensor&) { ++post_hooks; });
  autograd::DeferredWeightGrads deferred = deferred_backward(losses(m));
  EXPECT_EQ(tensor_hooks, 0);
  deferred.run();
  EXPECT_EQ(tensor_hooks, 1);
  EXPECT_EQ(post_hooks, 1);
  EXPECT_TRUE(
      tandem::testing::all_close(m.w1.grad(), grads_without_deferral()[0] * 2.0, 1e-12, 1e-12));
}

TEST(DeferredWeightGrads, OnlyLeafWeightsAndNeverForAutogradGrad) {
  TwoLayers m;
  // A weight computed from a leaf (as autocast's cast is) gets its gradient in backward.
  const Tensor x = micro_batches()[0];
  auto deferred =
      autograd::backward(linear(x, m.w1 * 1.0, m.b1).sum(), {.defer_weight_grads = true});
  EXPECT_EQ(deferred.size(), 0u);
  EXPECT_TRUE(m.w1.grad().defined());
  // autograd::grad returns every gradient it is asked for.
  const std::vector<Tensor> g = autograd::grad(m.loss(x), {m.w1, m.w2});
  EXPECT_TRUE(g[0].defined() && g[1].defined());
}

TEST(DeferredWeightGrads, NodesOnDeviceThreadsDeferIntoTheSameTask) {
  // Nodes on cpu:1 run on cpu:1's backward thread: the option travels with the graph task, not
  // with any thread's state.
  const Device d = Device::cpu(1);
  const std::vector<Tensor> expected = grads_without_deferral(d);
  TwoLayers m(d);
  autograd::DeferredWeightGrads deferred = deferred_backward(losses(m, d));
  EXPECT_EQ(deferred.size(), 6u);
  deferred.run();
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), expected[2], 1e-12, 1e-12));
}

// DistributedDataParallel's way: a post-accumulate hook queues a callback for the end of
// backward. With deferral the end is the end of run(), when every gradient is in.
TEST(DeferredWeightGrads, CallbacksWaitUntilEveryGradientIsIn) {
  TwoLayers m;
  std::vector<std::string> events;
  auto mark = [&](const char* name) {
    return [&events, name](const Tensor&) {
      events.push_back(name);
      if (events.size() == 1) queue_callback([&events] { events.push_back("end of backward"); });
    };
  };
  m.b1.register_post_accumulate_grad_hook(mark("b1"));
  m.w1.register_post_accumulate_grad_hook(mark("w1"));
  auto deferred = autograd::backward(m.loss(micro_batches()[0]), {.defer_weight_grads = true});
  EXPECT_EQ(events, (std::vector<std::string>{"b1"})) << "the callback waits for w1";
  deferred.run();
  EXPECT_EQ(events, (std::vector<std::string>{"b1", "w1", "end of backward"}));
}

// A post-accumulate hook that throws comes after the gradient was added: another run() must not
// add it again.
TEST(DeferredWeightGrads, AHookThatThrowsAfterTheAddDoesNotAddTwice) {
  TwoLayers m;
  bool fail = true;
  m.w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    if (fail) throw ValueError("post hook refused");
  });
  autograd::DeferredWeightGrads deferred = deferred_backward(losses(m));
  EXPECT_THROW(deferred.run(), ValueError);
  fail = false;
  deferred.run();
  const std::vector<Tensor> expected = grads_without_deferral();
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), expected[2], 1e-12, 1e-12));
  EXPECT_TRUE(tandem::testing::all_close(m.w1.grad(), expected[0], 1e-12, 1e-12));
}

// Backward passes whose outputs differ in their leading dims ([2, 3, 5] and [4, 5]): the parts
// are rows, so they still make one product.
TEST(DeferredWeightGrads, PassesOfDifferentLeadingDimsMakeOneProduct) {
  manual_seed(7);
  const TensorOptions o{.dtype = kFloat64};
  const Tensor w = randn({4, 5}, o).requires_grad_();
  const Tensor a = randn({2, 3, 5}, o), b = randn({4, 5}, o);
  autograd::DeferredWeightGrads deferred;
  deferred.append(autograd::backward(linear(a, w, Tensor()).sum(), {.defer_weight_grads = true}));
  deferred.append(autograd::backward(linear(b, w, Tensor()).sum(), {.defer_weight_grads = true}));
  ASSERT_EQ(deferred.size(), 2u);
  deferred.run();
  // d/dW of the sum of x·Wᵀ over every row x: the column sums of all the rows.
  const Tensor expected = (a.reshape({6, 5}).sum({0}) + b.sum({0})).unsqueeze(0).expand({4, 5});
  EXPECT_TRUE(tandem::testing::all_close(w.grad(), expected, 1e-12, 1e-12));
}

TEST(DeferredWeightGrads, AFailedRunKeepsWhatItDidNotReach) {
  TwoLayers m;
  bool fail = true;
  m.w2.register_hook([&](const Tensor& g) {
    if (fail) throw ValueError("hook refused");
    return g;
  });
  autograd::DeferredWeightGrads deferred = deferred_backward(losses(m));
  EXPECT_THROW(deferred.run(), ValueError);
  EXPECT_GT(deferred.size(), 0u);
  fail = false;
  deferred.run();
  EXPECT_TRUE(tandem::testing::all_close(m.w2.grad(), grads_without_deferral()[2], 1e-12, 1e-12));
}

// An op whose backward returns nothing for an input that needs a gradient: an error naming the
// op, with or without deferral (never a gradient silently missing from .grad).
Tensor forgetful(const Tensor& x, const Tensor& w) {
  Tensor y = x.matmul(w).detach();
  return record("forgetful", y, {x, w}, {}, [](const Tensor&, const NeedsGrad&, const Saved&) {
    return Grads(2);  // forgot both
  });
}

TEST(DeferredWeightGrads, AForgottenGradientIsAnErrorInEveryMode) {
  const Tensor x = micro_batches()[0];
  const Tensor w = randn({5, 3}, {.dtype = kFloat64}).requires_grad_();  // a leaf
  for (bool defer : {false, true}) {
    const Tensor loss = forgetful(x, w).sum();
    const std::string msg = tandem::testing::error_message<Error>(
        [&] { (void)autograd::backward(loss, {.defer_weight_grads = defer}); });
    EXPECT_THAT(msg, ::testing::HasSubstr("forgetful")) << "defer " << defer;
    EXPECT_THAT(msg, ::testing::HasSubstr("gave no gradient")) << "defer " << defer;
  }
}

}  // namespace
