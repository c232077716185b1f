// Whole-step CUDA graphs (core/cuda/graph.h): a captured step replayed on new inputs computes what
// the same steps run eagerly compute, bit for bit (the same kernels in the same order), with Adam,
// a GradScaler and SGD; memory the graph uses is never handed to work outside it; what cannot be
// captured (a host read, a random draw, an optimizer without its state) is a clear error that
// leaves the device usable. Skipped, visibly, without a GPU; without one, a graph is a clear error.
#if TANDEM_HAS_CUDA
#include <tandem/core/cuda/graph.h>
#endif

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

#if TANDEM_HAS_CUDA
namespace {

class CudaGraph : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
  const Device gpu = Device::cuda(0);
};

TEST(CudaGraphWithoutAGpu, IsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is visible: the CudaGraph cases run instead";
  EXPECT_THAT(error_message<DeviceError>([] { cuda::Graph g(0); }), HasSubstr("cuda:0"));
}

TEST_F(CudaGraph, ReplaysOnNewInputsAndComputesNothingWhileCapturing) {
  Tensor x = full({1000}, 1.0, {.device = gpu});
  Tensor y;
  cuda::Graph g(0);
  g.capture([&] { y = x * 2.0 + 1.0; });
  EXPECT_TRUE(g.captured());
  g.replay();
  EXPECT_EQ(values(y), std::vector<double>(1000, 3.0));
  x.copy_(full({1000}, 5.0));  // a new input: same address, new values
  g.replay();
  EXPECT_EQ(values(y), std::vector<double>(1000, 11.0));
  EXPECT_THAT(error_message<ValueError>([&] { g.capture([] {}); }), HasSubstr("reset() first"));
}

// The memory the graph's kernels use stays the graph's. A tensor made before the capture on the
// caller's stream and dropped inside it is read by every replay: without the private pool its
// block would go back to the caller's stream's cache, the next allocation of that size there
// would get it, and the replay would read -7s.
TEST_F(CudaGraph, ItsMemoryIsNotHandedToWorkOutsideIt) {
  Tensor before = arange(0, 4096, 1, {.dtype = kFloat32}).to(gpu);
  const void* address = before.data_ptr();
  Tensor y;
  cuda::Graph g(0);
  g.capture([&] {
    y = ((before + 1.0) * 3.0 - 2.0).relu();  // temporaries freed inside, too
    before = Tensor();
  });
  std::vector<Tensor> outside;
  for (int i = 0; i < 8; ++i) {
    outside.push_back(full({4096}, -7.0, {.device = gpu}));
    EXPECT_NE(outside.back().data_ptr(), address) << "the graph's block was handed out";
  }
  g.replay();
  const std::vector<double> got = values(y);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], (double(i) + 1) * 3 - 2) << i;
  for (const Tensor& t : outside) EXPECT_EQ(values(t)[0], -7.0);
}

// One MLP trained N steps eagerly and one whose step after 2 eager ones is a replayed graph, with
// the same initial weights and batches: the same parameters after every step.
template <typename MakeOpt>
void expect_graph_steps_equal_eager(Device gpu, MakeOpt make_opt, DType amp) {
  manual_seed(3);
  nn::Sequential eager_model(nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 5));
  nn::Sequential graph_model = nn::clone(eager_model);
  eager_model.to(gpu);
  graph_model.to(gpu);
  auto eager_opt = make_opt(eager_model.parameters());
  auto graph_opt = make_opt(graph_model.parameters());
  // The scale grows after every good step: the replays must update it on the GPU as eager does.
  optim::GradScaler eager_scaler({.growth_interval = 1, .enabled = amp == kFloat16}),
      graph_scaler({.growth_interval = 1, .enabled = amp == kFloat16});
  std::vector<Tensor> xs, ys;
  for (int s = 0; s < 6; ++s) {
    xs.push_back(randn({16, 20}).to(gpu));
    ys.push_back(
        from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0}, {16}).to(gpu));
  }
  auto step = [&](nn::Sequential& m, optim::Optimizer& opt, optim::GradScaler& scaler,
                  const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CUDA, kFloat16, amp == kFloat16);
      loss = cross_entropy(m(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  Tensor static_x = xs[0].clone(), static_y = ys[0].clone();
  cuda::Graph g(0);
  for (int s = 0; s < 6; ++s) {
    step(eager_model, eager_opt, eager_scaler, xs[size_t(s)], ys[size_t(s)]);
    if (s < 2) {  // warm-up, on the graph's stream
      g.run([&] { step(graph_model, graph_opt, graph_scaler, xs[size_t(s)], ys[size_t(s)]); });
    } else {
      if (s == 2)
        g.capture([&] { step(graph_model, graph_opt, graph_scaler, static_x, static_y); });
      static_x.copy_(xs[size_t(s)]);
      static_y.copy_(ys[size_t(s)]);
      g.replay();
    }
    const auto e = eager_model.parameters(), r = graph_model.parameters();
    for (size_t i = 0; i < e.size(); ++i)
      ASSERT_EQ(values(r[i]), values(e[i])) << "parameter " << i << " after step " << s;
  }
  EXPECT_EQ(graph_scaler.get_scale(), eager_scaler.get_scale());
  EXPECT_EQ(graph_scaler.skipped_steps(), eager_scaler.skipped_steps());
}

TEST_F(CudaGraph, AdamStepsReplayedEqualEagerSteps) {
  expect_graph_steps_equal_eager(
      gpu, [](std::vector<Tensor> p) { return optim::AdamW(std::move(p), {.capturable = true}); },
      kFloat32);
}

TEST_F(CudaGraph, Float16StepsWithAGradScalerReplayedEqualEagerSteps) {
  expect_graph_steps_equal_eager(
      gpu, [](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.capturable = true}); },
      kFloat16);
}

TEST_F(CudaGraph, SgdStepsReplayedEqualEagerSteps) {
  expect_graph_steps_equal_eager(
      gpu,
      [](std::vector<Tensor> p) {
        return optim::SGD(std::move(p), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
      },
      kFloat32);
}

TEST_F(CudaGraph, WhatCannotBeCapturedIsAClearErrorAndTheDeviceStaysUsable) {
  Tensor x = randn({64}).to(gpu);
  cuda::Graph g(0);
  EXPECT_THAT(error_message<CudaError>([&] { g.capture([&] { (void)x.sum().item(); }); }),
              HasSubstr("while capturing a CUDA graph"));
  EXPECT_FALSE(g.captured());
  EXPECT_THAT(
      error_message<CudaError>([&] { g.capture([&] { (void)nn::dropout(x, 0.5, true); }); }),
      HasSubstr("every replay would repeat the same numbers"));
  nn::Linear layer(4, 3);
  layer.to(gpu);
  optim::Adam host_steps(layer.parameters());
  (layer(randn({2, 4}).to(gpu)).sum()).backward();
  EXPECT_THAT(error_message<ValueError>([&] { g.capture([&] { host_steps.step(); }); }),
              HasSubstr("capturable = true"));
  optim::SGD cold(layer.parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_THAT(error_message<ValueError>([&] { g.capture([&] { cold.step(); }); }),
              HasSubstr("warm up"));
  EXPECT_THAT(error_message<CudaError>([&] { g.replay(); }), HasSubstr("before a successful"));
  EXPECT_EQ(values((x * 0.0).sum()), std::vector<double>{0.0});  // still usable
  g.capture([&] { x.mul_(2.0); });
  g.replay();
}

}  // namespace
#endif
