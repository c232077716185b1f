// tests/parallel/ddp_hooks_test.cpp — DDP's communication hooks, with ranks as threads (cpu:0,
// cpu:1): delay_allreduce gives the default's bits exactly; 16-bit compression stays close to
// them and divides before it sums (no float16 overflow); PowerSGD of full rank is the plain
// average, its first steps are plain all-reduces, and rank 1 still trains.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/powersgd.h>

#include "parallel/ddp_models.h"

namespace tandem::parallel {
namespace {

using tandem::testing::Mlp;

struct TrainRun {
  std::vector<double> params;  // rank 0's, after training
  std::vector<double> losses;  // rank 0's, per step
};

// Two ranks train the MLP for `steps` SGD steps on their halves of each batch of 16, with `hook`
// made fresh for each rank (a hook keeps per-rank state).
TrainRun train(std::function<std::shared_ptr<CommHook>()> hook, DType dtype, int steps) {
  constexpr int kWorld = 2, kBatch = 8;
  const auto data = tandem::testing::synthetic_data(int64_t(steps) * kWorld * kBatch);
  // Not a structured binding: clang does not let lambdas capture those.
  const Tensor x = data.first.to(dtype), y = data.second;
  std::vector<std::unique_ptr<Mlp>> models = tandem::testing::mlps_on_devices(kWorld, dtype, 0);
  TrainRun run;
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        Mlp& model = *models[size_t(r)];
        DistributedDataParallel ddp(
            model,
            {.group = group, .bucket_cap_mb = 0.05, .first_bucket_mb = 0.01, .comm_hook = hook()});
        optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
        for (int s = 0; s < steps; ++s) {
          opt.zero_grad();
          const int64_t at = int64_t(s) * kWorld * kBatch + int64_t(r) * kBatch;
          Tensor loss =
              cross_entropy(ddp(x.narrow(0, at, kBatch).to(dev)), y.narrow(0, at, kBatch).to(dev));
          loss.backward();
          opt.step();
          if (r == 0) run.losses.push_back(loss.item());
        }
      },
      kWorld);
  models[0]->to(Device::cpu());
  run.params = tandem::testing::flat_params(*models[0]);
  return run;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(DdpHooks, DelayAllreduceGivesTheOverlappedModesBitsExactly) {
  const TrainRun overlapped = train(allreduce_hook, kFloat64, 3);
  const TrainRun delayed = train(delay_allreduce, kFloat64, 3);
  EXPECT_EQ(delayed.params, overlapped.params);
}

TEST(DdpHooks, SixteenBitCompressionStaysCloseToFullPrecision) {
  const TrainRun full = train(allreduce_hook, kFloat32, 3);
  for (auto hook : {fp16_compress, bf16_compress}) {
    const TrainRun compressed = train(hook, kFloat32, 3);
    const double diff = max_difference(compressed.params, full.params);
    EXPECT_GT(diff, 0) << hook()->name() << " changed nothing: was it used?";
    EXPECT_LT(diff, 2e-3) << hook()->name();
  }
}

// 40,000 on each of 2 ranks: summed first, float16 (max 65,504) would give inf.
TEST(DdpHooks, Fp16CompressionDividesBeforeItSums) {
  std::vector<std::vector<float>> got(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        Tensor p = zeros({4});
        GradBucket bucket{
            .index = 0, .buffer = full({4}, 40000.0), .parameters = {p}, .offsets = {0}};
        auto hook = fp16_compress();
        hook->start(*group, bucket)->wait();
        hook->finish(*group, bucket);
        got[size_t(group->rank())] = bucket.buffer.to_vector<float>();
      },
      2);
  for (const auto& v : got) EXPECT_EQ(v, std::vector<float>(4, 40000.f));
}

// With rank = min(n, m), P spans the average's columns: P Qᵀ is the average itself.
TEST(DdpHooks, PowerSgdOfFullRankIsThePlainAverage) {
  std::vector<std::vector<double>> got(2), want(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int r = group->rank();
        Tensor w = zeros({8, 6}, {.dtype = kFloat64}), b = zeros({8}, {.dtype = kFloat64});
        manual_seed(0);  // each thread draws in turn: keep the two ranks' values apart by scale
        Tensor grads = randn({56}, {.dtype = kFloat64}) * (1.0 + r);
        GradBucket bucket{
            .index = 0, .buffer = grads.clone(), .parameters = {w, b}, .offsets = {0, 48}};
        auto hook = powersgd({.rank = 6, .start_iter = 0, .min_compression_rate = 0});
        hook->start(*group, bucket)->wait();
        hook->finish(*group, bucket);
        got[size_t(r)] = bucket.buffer.to_vector<double>();
        Tensor mean = grads.clone();
        group->all_reduce(mean, ReduceOp::Mean)->wait();
        want[size_t(r)] = mean.to_vector<double>();
      },
      2);
  for (int r = 0; r < 2; ++r) EXPECT_LT(max_difference(got[size_t(r)], want[size_t(r)]), 1e-10);
  EXPECT_EQ(got[0], got[1]) << "every rank holds the same average";
}

TEST(DdpHooks, PowerSgdStartsPlainAndTrainsAtRankOne) {
  const TrainRun plain = train(allreduce_hook, kFloat64, 12);
  const TrainRun low_rank =
      train([] { return powersgd({.rank = 1, .start_iter = 2}); }, kFloat64, 12);
  const TrainRun first_two =
      train([] { return powersgd({.rank = 1, .start_iter = 2}); }, kFloat64, 2);
  const TrainRun plain_two = train(allreduce_hook, kFloat64, 2);
  EXPECT_EQ(first_two.params, plain_two.params) << "the first start_iter steps are all-reduces";
  EXPECT_GT(max_difference(low_rank.params, plain.params), 0) << "then it compresses";
  auto mean = [](const std::vector<double>& v, size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += v[i];
    return s / double(to - from);
  };
  EXPECT_LT(mean(low_rank.losses, 8, 12), mean(low_rank.losses, 0, 4)) << "it still learns";
}

TEST(DdpHooks, NamedHooksAndBadNames) {
  EXPECT_EQ(comm_hook_named("delay_allreduce")->name(), "delay_allreduce");
  EXPECT_EQ(comm_hook_named("powersgd:4")->name(), "powersgd:4");
  EXPECT_EQ(comm_hook_named("powersgd:2:10")->name(), "powersgd:2");
  EXPECT_THROW(comm_hook_named("powersgd:2:x"), ValueError);
  EXPECT_EQ(comm_hook_named("")->name(), "allreduce");
  EXPECT_THROW(comm_hook_named("powersgd:0"), ValueError);
  EXPECT_THROW(comm_hook_named("zip"), ValueError);
}

}  // namespace
}  // namespace tandem::parallel
