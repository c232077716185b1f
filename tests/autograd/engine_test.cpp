// The engine: accumulation, retain_graph, no-grad, detach, version counters, and its errors.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor w = tensor({1, 2, 3}).requires_grad_();
  (w * w).sum().backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{2, 4, 6}));
  (w * 3.0).sum().backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{5, 7, 9}));
  w.set_grad(Tensor());
  EXPECT_FALSE(w.grad().defined());
}

TEST(Engine, LeafGradientsNeverAliasEachOther) {
  Tensor a = ones({3}).requires_grad_(), b = ones({3}).requires_grad_();
  (a + b).sum().backward();  // add passes the same dy to both inputs
  EXPECT_NE(a.grad().impl().storage, b.grad().impl().storage);
  a.grad().fill_(5);
  EXPECT_EQ(values(b.grad()), (std::vector<double>{1, 1, 1}));
}

TEST(Engine, SecondBackwardNeedsRetainGraph) {
  Tensor x = tensor({1, 2}).requires_grad_();
  Tensor y = (x.exp() * x).sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  const std::vector<double> once = values(x.grad());
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), tensor({2 * once[0], 2 * once[1]})));
  const std::string msg = error_message<AutogradError>([&] { y.backward(); });
  EXPECT_THAT(msg, HasSubstr("second time"));
  EXPECT_THAT(msg, HasSubstr("retain_graph"));
}

TEST(Engine, NoGradGuardAndDetachCutTheGraph) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor z = x.detach() * 2.0 + x;
  EXPECT_TRUE(z.requires_grad());
  EXPECT_EQ(x.detach().impl().storage, x.impl().storage);
  z.sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1}));
  EXPECT_EQ(z.grad_fn_name(), "add");
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(z.is_leaf());
}

TEST(Engine, ModifyingASavedTensorInPlaceIsAnError) {
  Tensor w = tensor({1, 2}).requires_grad_();
  Tensor x = tensor({3, 4});
  Tensor y = (w * x).sum();  // mul saved x
  x.mul_(2);                 // ... which is then changed
  const std::string msg = error_message<AutogradError>([&] { y.backward(); });
  EXPECT_THAT(msg, HasSubstr("modified by an in-place op"));
  EXPECT_THAT(msg, HasSubstr("mul"));
  // Changing a parameter in place while grad mode is on is refused outright.
  EXPECT_THROW(w.add_(ones({2})), AutogradError);
  NoGradGuard g;
  w.add_(ones({2}));  // fine under no-grad (as in an optimizer step)
  EXPECT_EQ(values(w), (std::vector<double>{2, 3}));
}

TEST(Engine, ClearErrorsForMisuse) {
  EXPECT_THROW(ones({2}).sum().backward(), AutogradError);  // nothing requires grad
  Tensor x = ones({2, 2}).requires_grad_();
  const std::string msg = error_message<ShapeError>([&] { (x * 2.0).backward(); });
  EXPECT_THAT(msg, HasSubstr("[2, 2]"));
  const std::string dtype = error_message<DTypeError>([&] {
    (x * 2.0).backward(full({2, 2}, 0.5, {.dtype = kFloat64}));
  });
  EXPECT_THAT(dtype, HasSubstr("float64"));
  EXPECT_THAT(dtype, HasSubstr("float32"));
  (x * 2.0).backward(full({2, 2}, 0.5));  // explicit gradient is fine
  EXPECT_EQ(values(x.grad()), std::vector<double>(4, 1.0));
  EXPECT_THROW((x * 2.0).requires_grad_(false), AutogradError);  // not a leaf
}

TEST(Engine, GradientsFlowBackAcrossDevices) {
  Tensor w = tensor({1, 2}).requires_grad_();  // on cpu
  Tensor far = w.to(Device("cpu:3")) * tensor({3, 4}, {.device = Device("cpu:3")});
  far.sum().backward();
  EXPECT_EQ(w.grad().device(), Device("cpu"));
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3, 4}));
}

TEST(Engine, SavedTensorsAreFreedAfterBackward) {
  const Device d("cpu:9");
  Tensor x = randn({1000}, {.device = d}).requires_grad_();
  const int64_t base = memory_stats(d).allocated_bytes;
  Tensor loss = x.exp().tanh().sigmoid().sum();
  const int64_t with_graph = memory_stats(d).allocated_bytes;
  EXPECT_GE(with_graph - base, 3 * 4000);  // the intermediates are alive, saved for backward
  loss.backward();
  // Only the leaf's gradient remains (plus the loss itself): the graph's buffers are gone.
  EXPECT_LE(memory_stats(d).allocated_bytes - base, 4000 + 64);
}
