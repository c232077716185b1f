// tests/parallel/data_parallel_test.cpp — DataParallel is single-device training, split within one
// process: over 2 and 3 virtual CPU devices, with the same data and initial weights, the module's
// parameters after 5 steps match one device's to 1e-10 absolute + 1e-8 relative (float64; what
// remains is the order of sums), even when the batch does not divide evenly.
#include <tandem/parallel/data_parallel/data_parallel.h>

#include <tandem/core/cuda_device.h>
#include <tandem/core/thread_pool.h>
#include <thread>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::error_message;
using tandem::testing::Mlp;
using ::testing::HasSubstr;

constexpr int kSteps = 5;

std::vector<Device> cpus(int n) {
  std::vector<Device> d;
  for (int k = 0; k < n; ++k) d.push_back(Device::cpu(k));
  return d;
}

// Trains a float64 Mlp for kSteps on batches of `batch`; `loss(x, y)` runs the model and the loss.
template <typename Loss>
void train(Mlp& model, bool adam, int64_t batch, Loss&& loss) {
  auto [x32, y] = tandem::testing::synthetic_data(kSteps * batch);
  const Tensor x = x32.to(kFloat64);
  auto opt = tandem::testing::make_optimizer(model, adam);
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    loss(x.narrow(0, s * batch, batch), y.narrow(0, s * batch, batch)).backward();
    opt->step();
  }
}

std::vector<double> one_device(bool adam, int64_t batch) {
  manual_seed(0);
  Mlp model;
  model.to(kFloat64);
  train(model, adam, batch,
        [&](const Tensor& x, const Tensor& y) { return cross_entropy(model.forward(x), y); });
  return tandem::testing::flat_params(model);
}

// With `criterion`, each device computes the loss of its own shard (DataParallelCriterion).
template <typename M = Mlp>
std::vector<double> data_parallel(bool adam, int64_t batch, const std::vector<Device>& devices,
                                  bool criterion = false) {
  manual_seed(0);
  M init;
  init.to(kFloat64);
  init.to(devices[0]);
  DataParallel dp(init, {.device_ids = devices, .allow_duplicate_devices = true});
  const DataParallelCriterion loss(
      [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); }, devices[0]);
  train(dp.module<M>(), adam, batch, [&](const Tensor& x, const Tensor& y) {
    const Tensor xd = x.to(devices[0]), yd = y.to(devices[0]);
    return criterion ? loss(dp.forward_shards(xd), yd) : cross_entropy(dp(xd), yd);
  });
  dp.module().to(Device::cpu());
  return tandem::testing::flat_params(dp.module<M>());
}
std::vector<double> data_parallel(bool adam, int64_t batch, int devices, bool criterion = false) {
  return data_parallel(adam, batch, cpus(devices), criterion);
}

void expect_same(const std::vector<double>& a, const std::vector<double>& b) {
  tandem::testing::expect_same_params(a, b);
}

TEST(DataParallel, TwoDevicesTrainAsOneWithSgdMomentum) {
  expect_same(data_parallel(false, 8, 2), one_device(false, 8));
}

TEST(DataParallel, ThreeDevicesTrainAsOneWithAdam) {
  expect_same(data_parallel(true, 9, 3), one_device(true, 9));
}

TEST(DataParallel, UnevenChunksBatch7OnThreeDevicesTrainAsOne) {
  expect_same(data_parallel(false, 7, 3), one_device(false, 7));
  expect_same(data_parallel(true, 7, 3), one_device(true, 7));
}

TEST(DataParallel, WithTheCriterionOnEachDeviceUnevenChunksTrainAsOne) {
  expect_same(data_parallel(false, 7, 3, true), one_device(false, 7));
  expect_same(data_parallel(true, 8, 2, true), one_device(true, 8));
}

// The same cases on the GPU, compared with one CPU device (float64; cuBLAS sums in its own
// order, within the same tolerance). One GPU runs two replicas on cuda:0 (duplicate devices);
// cuda:0 + cuda:1 needs two GPUs and is skipped, visibly, without them.
TEST(DataParallelCuda, TwoReplicasOnCuda0TrainAsOneCpuDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const std::vector<Device> gpu0{Device::cuda(0), Device::cuda(0)};
  expect_same(data_parallel(false, 8, gpu0), one_device(false, 8));
  expect_same(data_parallel(true, 7, gpu0, true), one_device(true, 7));
}

TEST(DataParallelCuda, TwoGpusTrainAsOneCpuDevice) {
  if (cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, " << cuda::device_count() << " visible";
  const std::vector<Device> gpus{Device::cuda(0), Device::cuda(1)};
  expect_same(data_parallel(false, 8, gpus), one_device(false, 8));
  expect_same(data_parallel(true, 7, gpus, true), one_device(true, 7));
}

// Each replica checkpoints its own activations and recomputes them on its device's backward
// thread in backward; the result is still one device's.
TEST(DataParallel, WithActivationCheckpointingTrainsAsOne) {
  using tandem::testing::CheckpointedMlp;
  expect_same(data_parallel<CheckpointedMlp>(false, 8, cpus(2)), one_device(false, 8));
  expect_same(data_parallel<CheckpointedMlp>(true, 7, cpus(3), true), one_device(true, 7));
}

TEST(DataParallel, TheCriterionLeavesOutputsOnTheirDevicesAndReturnsTheBatchMean) {
  manual_seed(0);
  DataParallel dp(Mlp{}, {.device_ids = cpus(3)});
  auto [x, y] = tandem::testing::synthetic_data(7);
  const std::vector<Tensor> shards = dp.forward_shards(x);
  ASSERT_EQ(shards.size(), 3u);
  for (size_t k = 0; k < shards.size(); ++k) EXPECT_EQ(shards[k].device(), Device::cpu(int(k)));
  EXPECT_EQ(shards[2].size(0), 1);  // chunk(7, 3): 3, 3, 1
  const DataParallelCriterion loss(
      [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); });
  const Tensor l = loss(shards, y);
  EXPECT_EQ(l.device(), Device::cpu());
  EXPECT_NEAR(l.item(), cross_entropy(dp(x), y).item(), 1e-5);
}

TEST(DataParallel, GradientsReachTheModulesOwnParameters) {
  manual_seed(0);
  DataParallel dp(Mlp{}, {.device_ids = cpus(2)});
  const Tensor before = dp.module<Mlp>().fc1.weight.clone();
  optim::SGD opt(dp.module().parameters(), {.lr = 0.5});
  auto [x, y] = tandem::testing::synthetic_data(8);
  cross_entropy(dp(x), y).backward();
  for (Tensor& p : dp.module().parameters()) {
    ASSERT_TRUE(p.grad().defined()) << "a replica's gradient did not reach the module";
    EXPECT_EQ(p.grad().device(), Device::cpu());
  }
  opt.step();
  EXPECT_FALSE(tandem::testing::all_close(dp.module<Mlp>().fc1.weight, before));
}

TEST(DataParallel, ASmallBatchUsesFewerDevices) {
  manual_seed(0);
  DataParallel dp(Mlp{}, {.device_ids = cpus(3)});
  auto [x, y] = tandem::testing::synthetic_data(2);  // chunk(2, 3) gives 2 pieces
  const Tensor out = dp(x);
  EXPECT_EQ(out.shape(), (Shape{2, 10}));
  EXPECT_EQ(out.device(), Device::cpu());
}

TEST(DataParallel, EvaluationUnderNoGradRecordsNothing) {
  manual_seed(0);
  DataParallel dp(Mlp{}, {.device_ids = cpus(2)});
  auto [x, y] = tandem::testing::synthetic_data(6);
  const Tensor with_grad = dp(x).detach();
  NoGradGuard off;
  const Tensor out = dp(x);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(tandem::testing::all_close(out, with_grad, 1e-6, 1e-6));
}

// A struct of tensors: its tensors are cut, its scale is copied into every piece.
struct Batch {
  Tensor x, e;
  double scale = 1;
  void for_each_tensor(const std::function<void(Tensor&)>& f) {
    f(x);
    f(e);
  }
};

struct SeveralInputs : nn::Module {
  nn::Linear a{4, 3}, b{5, 3};
  void visit(nn::Visitor& v) override {
    v("a", a);
    v("b", b);
  }
  Tensor forward(const Tensor& x, const std::vector<Tensor>& extra, double scale) {
    return (a(x) + b(extra[0])) * scale + extra[1];
  }
  Tensor forward(const std::tuple<Tensor, Tensor>& xy) {
    return a(std::get<0>(xy)) * std::get<1>(xy);
  }
  Tensor forward(const Batch& batch) { return (a(batch.x) + b(batch.e)) * batch.scale; }
};

TEST(DataParallel, VectorTupleAndPlainArgumentsAreScatteredByKind) {
  manual_seed(0);
  SeveralInputs m;
  const Tensor x = randn({7, 4}), e0 = randn({7, 5}), e1 = randn({7, 3});
  const Tensor expected = m.forward(x, {e0, e1}, 2.0);
  const Tensor expected_tuple = m.forward(std::make_tuple(x, e1));
  DataParallel dp(m, {.device_ids = cpus(3)});
  using M = SeveralInputs;  // forwards of other arguments than one tensor name the module's type
  EXPECT_TRUE(
      tandem::testing::all_close(dp.forward<M>(x, std::vector<Tensor>{e0, e1}, 2.0), expected));
  EXPECT_TRUE(tandem::testing::all_close(dp.forward<M>(std::make_tuple(x, e1)), expected_tuple));
  const Batch batch{x, e0, 3.0};
  EXPECT_TRUE(tandem::testing::all_close(dp.forward<M>(batch), m.forward(batch)));
  // Gradients flow back through every kind of piece.
  const Tensor xg = x.detach().requires_grad_(), eg = e0.detach().requires_grad_();
  dp.forward<M>(Batch{xg, eg, 3.0}).sum().backward();
  const Tensor xr = x.detach().requires_grad_(), er = e0.detach().requires_grad_();
  m.forward(Batch{xr, er, 3.0}).sum().backward();
  EXPECT_TRUE(tandem::testing::all_close(xg.grad(), xr.grad()));
  EXPECT_TRUE(tandem::testing::all_close(eg.grad(), er.grad()));
  // 7 and 8 rows both cut into 3 pieces, but pieces of different batches do not belong together.
  EXPECT_THAT(error_message<ShapeError>([&] {
                dp.forward<M>(x, std::vector<Tensor>{randn({8, 5}), randn({8, 3})}, 2.0);
              }),
              HasSubstr("different sizes (7 and 8) along the batch dimension 0"));
  EXPECT_THAT(error_message<ShapeError>([&] {
                dp.forward<M>(Batch{x, randn({6, 5}), 1.0});
              }),
              HasSubstr("same size along dim 0"));
}

// Each replica computes with its share of the caller's intra-op threads: one each for two
// replicas on two threads (so that the pool's workers do not compete with them for the cores).
struct ThreadsSeen : nn::Module {
  nn::Linear fc{4, 2};
  std::shared_ptr<std::vector<int>> seen = std::make_shared<std::vector<int>>(4, 0);
  void visit(nn::Visitor& v) override { v("fc", fc); }
  Tensor forward(const Tensor& x) {
    (*seen)[size_t(x.device().index())] = intra_op_threads();
    return fc(x);
  }
};

TEST(DataParallel, EachReplicaGetsItsShareOfTheIntraOpThreads) {
  set_num_threads(4);
  DataParallel dp(ThreadsSeen{}, {.device_ids = cpus(2)});
  dp(ones({4, 4}));
  EXPECT_EQ(*dp.module<ThreadsSeen>().seen, (std::vector<int>{2, 2, 0, 0}));
  set_num_threads(int(std::max(1u, std::thread::hardware_concurrency())));
}

struct Failing : nn::Module {
  nn::Linear fc{4, 2};
  void visit(nn::Visitor& v) override { v("fc", fc); }
  Tensor forward(const Tensor& x) {
    if (x.device() == Device::cpu(1)) throw ShapeError("this replica fails on purpose");
    return fc(x);
  }
};

TEST(DataParallel, AnExceptionInAReplicaNamesItsDeviceAndNothingHangs) {
  DataParallel dp(Failing{}, {.device_ids = cpus(2)});
  const std::string msg = error_message<ShapeError>([&] { dp(ones({4, 4})); });
  EXPECT_THAT(msg, HasSubstr("replica 1 on cpu:1"));
  EXPECT_THAT(msg, HasSubstr("fails on purpose"));
  DataParallel ok(Mlp{}, {.device_ids = cpus(2)});
  EXPECT_EQ(ok(ones({4, 784})).shape(), (Shape{4, 10}));  // the replica threads still work
}

TEST(DataParallel, BadDeviceListsAndMisplacedModulesAreClearErrors) {
  EXPECT_THAT(error_message<DeviceError>([] {
                DataParallel(Mlp{}, {.device_ids = {Device::cpu(1), Device::cpu(0)}});
              }),
              HasSubstr("is on cpu, but the module must be on device_ids[0] = cpu:1"));
  EXPECT_THAT(error_message<ValueError>([] {
                DataParallel(Mlp{}, {.device_ids = {Device::cpu(0), Device::cpu(0)}});
              }),
              HasSubstr("listed twice"));
  DataParallel twice(
      Mlp{}, {.device_ids = {Device::cpu(0), Device::cpu(0)}, .allow_duplicate_devices = true});
  EXPECT_EQ(twice(ones({4, 784})).shape(), (Shape{4, 10}));
  EXPECT_THAT(error_message<DeviceError>([] {
                DataParallel(Mlp{}, {.device_ids = {Device::cpu(0), Device::cuda(0)}});
              }),
              HasSubstr("mix"));
}

}  // namespace
}  // namespace tandem::parallel
