// GradScaler, against torch.amp.GradScaler's rules: scaled losses, exact unscaling, a skipped
// and counted step with a halved scale on inf/NaN, doubling after growth_interval good steps,
// the call order enforced, disabled as a pass-through, and the state through JSON. The DDP case
// (both ranks skip) is in tests/parallel/grad_scaler_ddp_test.cpp; a step with no host sync on
// cuda:0 in tests/nn/cuda_sync_test.cpp.
#include <cmath>
#include <limits>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::values;

namespace {

// A parameter p = [1, 2] on an SGD with lr 1: a step subtracts the (unscaled) gradient.
struct OneParameter {
  Tensor p = from_vector<double>({1.0, 2.0}, {2}).requires_grad_();
  optim::SGD opt{{p}, {.lr = 1.0, .momentum = 0}};
  // Backward of scale(sum(p · g)): p's gradient is scale · g.
  void backward(optim::GradScaler& s, std::vector<double> g) {
    opt.zero_grad();
    s.scale((p * from_vector<double>(g, {2})).sum()).backward();
  }
};

TEST(GradScaler, ScalesTheLossAndStepsWithTheTrueGradient) {
  OneParameter t;
  optim::GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  t.backward(scaler, {0.5, -0.25});
  EXPECT_EQ(values(t.p.grad()), (std::vector<double>{32768.0, -16384.0}));
  scaler.step(t.opt);
  EXPECT_FALSE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_EQ(values(t.p), (std::vector<double>{0.5, 2.25}));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScaler, AnInfOrNaNSkipsTheStepHalvesTheScaleAndIsCounted) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    OneParameter t;
    optim::GradScaler scaler;
    t.backward(scaler, {bad, 1.0});
    scaler.step(t.opt);
    EXPECT_TRUE(scaler.last_step_skipped());
    scaler.update();
    EXPECT_EQ(values(t.p), (std::vector<double>{1.0, 2.0})) << "the step was skipped";
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
    t.backward(scaler, {1.0, 1.0});  // the next good step goes through at the new scale
    scaler.step(t.opt);
    EXPECT_FALSE(scaler.last_step_skipped());
    scaler.update();
    EXPECT_EQ(values(t.p), (std::vector<double>{0.0, 1.0}));
    EXPECT_EQ(scaler.skipped_steps(), 1);
  }
}

TEST(GradScaler, TwoThousandGoodStepsDoubleTheScale) {
  OneParameter t;
  optim::GradScaler scaler;
  for (int i = 0; i < 1999; ++i) {
    t.backward(scaler, {1e-6, 1e-6});
    scaler.step(t.opt);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  t.backward(scaler, {1e-6, 1e-6});
  scaler.step(t.opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 131072.0);
  // A skip resets the count: 2,000 more good steps are needed after it.
  t.backward(scaler, {std::numeric_limits<double>::infinity(), 0});
  scaler.step(t.opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

TEST(GradScaler, UnscaleBeforeClippingClipsTheTrueGradient) {
  OneParameter t;
  optim::GradScaler scaler({.init_scale = 1024});
  t.backward(scaler, {3.0, 4.0});
  scaler.unscale_(t.opt);
  EXPECT_EQ(values(t.p.grad()), (std::vector<double>{3.0, 4.0}));
  EXPECT_NEAR(optim::clip_grad_norm_({t.p}, 1.0), 5.0, 1e-12);
  scaler.step(t.opt);  // does not unscale a second time
  EXPECT_FALSE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_NEAR(values(t.p)[0], 1.0 - 0.6, 1e-6);
  EXPECT_NEAR(values(t.p)[1], 2.0 - 0.8, 1e-6);
}

TEST(GradScaler, CallsOutOfOrderAreErrors) {
  OneParameter t;
  optim::GradScaler scaler;
  t.backward(scaler, {1.0, 1.0});
  scaler.unscale_(t.opt);
  EXPECT_THAT(error_message<ValueError>([&] { scaler.unscale_(t.opt); }),
              ::testing::HasSubstr("unscale_() was already called"));
  scaler.step(t.opt);
  EXPECT_THAT(error_message<ValueError>([&] { scaler.step(t.opt); }),
              ::testing::HasSubstr("step() was already called"));
  scaler.update();
  EXPECT_THAT(error_message<ValueError>([&] { scaler.update(); }),
              ::testing::HasSubstr("update() needs a step() first"));
  EXPECT_THAT(error_message<ValueError>([] { optim::GradScaler({.backoff_factor = 2}); }),
              ::testing::HasSubstr("0 < backoff_factor < 1"));
}

TEST(GradScaler, DisabledIsAPassThrough) {  // bfloat16 training
  OneParameter t;
  optim::GradScaler scaler({.enabled = false});
  t.backward(scaler, {0.5, 0.5});
  EXPECT_EQ(values(t.p.grad()), (std::vector<double>{0.5, 0.5}));
  scaler.step(t.opt);
  EXPECT_FALSE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_EQ(values(t.p), (std::vector<double>{0.5, 1.5}));
}

TEST(GradScaler, StateRoundTripsThroughJson) {
  OneParameter t;
  optim::GradScaler a;
  t.backward(a, {std::numeric_limits<double>::infinity(), 0});
  a.step(t.opt);
  a.update();
  for (int i = 0; i < 3; ++i) {
    t.backward(a, {1, 1});
    a.step(t.opt);
    a.update();
  }
  const std::string json = optim::to_json(a.state_dict());
  optim::GradScaler b;
  b.load_state_dict(optim::grad_scaler_state_from_json(json));
  EXPECT_EQ(b.get_scale(), 32768.0);
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_EQ(b.state_dict().growth_tracker, 3);
  EXPECT_THAT(
      error_message<ValueError>([] { optim::grad_scaler_state_from_json("{\"scale\":1}"); }),
      ::testing::HasSubstr("malformed saved state"));
  EXPECT_THAT(error_message<ValueError>([&] { b.load_state_dict({.scale = -1}); }),
              ::testing::HasSubstr("expected a positive number"));
}

// Adam skips on the device's flag (Optimizer::step_unless, no host read): training with a scaler
// whose second step overflows equals plain Adam over the other steps, bit for bit (the scale is
// a power of two, so unscaled gradients are the true ones), step counts included.
void expect_scaled_adam_equals_adam_without_the_bad_step(Device device, DType dtype) {
  manual_seed(3);
  const Tensor w0 = randn({5, 4}, {.dtype = dtype}), x = randn({8, 5}, {.dtype = dtype});
  Tensor a = w0.to(device).requires_grad_(), b = w0.to(device).requires_grad_();
  const Tensor xd = x.to(device);
  optim::AdamW scaled_opt({a}, {.lr = 1e-2}), plain_opt({b}, {.lr = 1e-2});
  optim::GradScaler scaler({.init_scale = 1024, .growth_interval = 2});
  for (int step = 0; step < 5; ++step) {
    scaled_opt.zero_grad();
    scaler.scale((xd.matmul(a) * xd.matmul(a)).mean()).backward();
    if (step == 1) {
      NoGradGuard no_grad;
      a.grad().narrow(0, 2, 1).fill_(std::numeric_limits<double>::infinity());
    }
    scaler.step(scaled_opt);
    scaler.update();
    if (step == 1) continue;
    plain_opt.zero_grad();
    (xd.matmul(b) * xd.matmul(b)).mean().backward();
    plain_opt.step();
  }
  EXPECT_EQ(values(a), values(b)) << device << " " << dtype;
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 1024.0);  // halved, then doubled after 2 good steps, then 1 more
  const auto steps = [](const optim::Optimizer& o) {
    return values(o.state_dict().tensors.front().second);
  };
  EXPECT_EQ(steps(scaled_opt), std::vector<double>{4.0});
  EXPECT_EQ(steps(plain_opt), std::vector<double>{4.0});
}

TEST(GradScaler, AdamSkipsOnTheDevicesFlagAndEqualsAdamWithoutTheSkippedStep) {
  expect_scaled_adam_equals_adam_without_the_bad_step(Device::cpu(), kFloat64);
  expect_scaled_adam_equals_adam_without_the_bad_step(Device::cpu(), kFloat32);
}

TEST(GradScaler, AdamSkipsOnTheDevicesFlagOnCuda0) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_scaled_adam_equals_adam_without_the_bad_step(Device::cuda(0), kFloat32);
  expect_scaled_adam_equals_adam_without_the_bad_step(Device::cuda(0), kFloat64);
}

TEST(GradScaler, GradientsOnCuda0) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  Tensor p = from_vector<float>({1.0f, 2.0f}, {2}).to(Device::cuda(0)).requires_grad_();
  optim::SGD opt({p}, {.lr = 1.0, .momentum = 0});
  optim::GradScaler scaler;
  scaler.scale((p * 0.5).sum()).backward();
  scaler.step(opt);
  EXPECT_FALSE(scaler.last_step_skipped());
  scaler.update();
  EXPECT_EQ(values(p), (std::vector<double>{0.5, 1.5}));
  opt.zero_grad();
  scaler.scale((p * std::numeric_limits<double>::infinity()).sum()).backward();
  scaler.step(opt);
  scaler.update();
  EXPECT_EQ(values(p), (std::vector<double>{0.5, 1.5}));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

}  // namespace
