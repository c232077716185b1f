// tests/parallel/fsdp_test.cpp — fully_shard (ZeRO-3) trains as one device: N ranks, each with
// batch b and 1/N of every parameter, end with the parameters one device reaches with batch N·b,
// in float64 to DDP's tolerance (1e-10 absolute + 1e-8 relative); with 2 ranks, bit for bit what
// DDP reaches. The MLP's layers have row counts that do not divide by 3 or 4 (30, 10), so shards
// of unequal length and padding are exercised. Ranks are threads on cpu:0..N-1.
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/fsdp/fully_shard.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel::fsdp_test {  // named: unity builds join test files
namespace {

using tandem::testing::flat_params;

constexpr int64_t kBatch = 8;  // per rank
constexpr int kSteps = 3;

struct Recipe {
  int world = 2;
  bool reshard = true;  // reshard_after_forward
  enum { kSgd, kAdam, kAdamWGroups } optimizer = kSgd;
  bool clip = false;   // clip the gradient norm to 0.5 (it is about 2 here, so it bites)
  int accumulate = 1;  // micro-batches per step (no_sync on all but the last)
  bool cnn = false;
  bool checkpointed = false;  // fc2 recomputed in backward
};

nn::Sequential model_for(const Recipe& r) {
  if (r.cnn)
    return nn::Sequential{{"conv1", nn::Conv2d(1, 8, 3)}, {"relu1", nn::ReLU()},
                          {"conv2", nn::Conv2d(8, 6, 3)}, {"relu2", nn::ReLU()},
                          {"flatten", nn::Flatten()},     {"fc", nn::Linear(6 * 24 * 24, 10)}};
  nn::AnyModule fc2 = nn::Linear(64, 30);
  if (r.checkpointed) fc2 = nn::Checkpointed(fc2);
  return nn::Sequential{{"flatten", nn::Flatten()}, {"fc1", nn::Linear(784, 64)},
                        {"relu1", nn::ReLU()},      {"fc2", fc2},
                        {"relu2", nn::ReLU()},      {"fc3", nn::Linear(30, 10)}};
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Recipe& r, nn::Module& m) {
  switch (r.optimizer) {
    case Recipe::kSgd:
      return std::make_unique<optim::SGD>(m.parameters(),
                                          optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    case Recipe::kAdam:
      return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
    default:
      return std::make_unique<optim::AdamW>(
          optim::adamw_groups(m.named_parameters(), {.lr = 1e-2, .weight_decay = 0.1}));
  }
}

using Data = std::pair<Tensor, Tensor>;
Data data_for(const Recipe& r) {  // before any rank thread starts (the global generator)
  const auto d = tandem::testing::synthetic_data(kSteps * r.accumulate * r.world * kBatch);
  return {d.first.to(kFloat64), d.second};
}

// Trains `model` for kSteps on rows [rank·per_rank, ...) of each global batch; `sync(last)`
// gives the scope a micro-batch's backward runs in, `clip()` clips.
template <typename Forward, typename Clip, typename Sync>
void train(const Recipe& r, const Data& data, nn::Module& model, int rank, int64_t per_rank,
           Device dev, Forward&& forward, Clip&& clip, Sync&& sync) {
  auto opt = make_optimizer(r, model);
  std::unique_ptr<optim::LRScheduler> schedule;
  if (r.optimizer == Recipe::kAdamWGroups)
    schedule = std::make_unique<optim::WarmupCosineLR>(*opt, 1, kSteps, 1e-3);
  int64_t start = 0;
  for (int s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    for (int m = 0; m < r.accumulate; ++m) {
      const int64_t at = start + rank * per_rank;
      const Tensor x = data.first.narrow(0, at, per_rank).to(dev);
      const Tensor y = data.second.narrow(0, at, per_rank).to(dev);
      [[maybe_unused]] auto scope = sync(m + 1 == r.accumulate);
      cross_entropy(forward(x), y).backward();
      start += r.world * kBatch;
    }
    if (r.clip) clip();
    opt->step();
    if (schedule) schedule->step();
  }
}

std::vector<double> one_device(const Recipe& r) {
  manual_seed(0);
  nn::Sequential model = model_for(r);
  model.to(kFloat64);
  train(
      r, data_for(r), model, 0, r.world * kBatch, Device::cpu(),
      [&](const Tensor& x) { return model(x); },
      [&] { optim::clip_grad_norm_(model.parameters(), 0.5); }, [](bool) { return 0; });
  return flat_params(model);
}

// The whole parameters after training under fully_shard; every rank's must be the same.
std::vector<double> fully_sharded(const Recipe& r) {
  std::vector<nn::Sequential> models;
  for (int rank = 0; rank < r.world; ++rank) {
    manual_seed(rank == 0 ? 0 : 100 + rank);  // rank 0's weights must reach every rank
    models.push_back(model_for(r));
    models.back().to(kFloat64);
    models.back().to(Device::cpu(rank));
  }
  const Data data = data_for(r);
  std::vector<std::vector<double>> result(size_t(r.world));
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        FullyShardedModule fsdp(std::move(models[size_t(rank)]),
                                {.group = group, .reshard_after_forward = r.reshard});
        train(
            r, data, fsdp, rank, kBatch, Device::cpu(rank),
            [&](const Tensor& x) { return fsdp(x); },
            [&] { clip_grad_norm_(*fsdp.placements(), 0.5); },
            [&](bool last) {
              return last ? std::optional<FullyShardedModule::NoSync>()
                          : std::optional<FullyShardedModule::NoSync>(std::in_place, fsdp);
            });
        nn::Sequential whole = model_for(r);
        whole.to(kFloat64);
        nn::StateDict full = fsdp.full_state_dict();
        for (auto& [name, t] : full) t = t.to(Device::cpu());
        whole.load_state_dict(full);
        result[size_t(rank)] = flat_params(whole);
      },
      r.world);
  for (int rank = 1; rank < r.world; ++rank)
    EXPECT_EQ(result[size_t(rank)], result[0]) << "rank " << rank << " ended elsewhere than rank 0";
  return result[0];
}

void expect_one_device(const Recipe& r) {
  tandem::testing::expect_same_params(fully_sharded(r), one_device(r));
}

TEST(FullyShard, SgdOnTwoRanksTrainsAsOneDevice) { expect_one_device({}); }
TEST(FullyShard, AdamOnThreeRanksTrainsAsOneDevice) {
  expect_one_device({.world = 3, .optimizer = Recipe::kAdam});
}
TEST(FullyShard, AdamWGroupsScheduleAndClippingOnFourRanksTrainsAsOneDevice) {
  expect_one_device({.world = 4, .optimizer = Recipe::kAdamWGroups, .clip = true});
}
TEST(FullyShard, WithoutReshardAfterForwardTrainsAsOneDevice) {
  expect_one_device({.world = 3, .reshard = false, .optimizer = Recipe::kAdam, .clip = true});
}
TEST(FullyShard, GradientAccumulationUnderNoSyncTrainsAsOneDevice) {
  expect_one_device({.world = 2, .optimizer = Recipe::kAdam, .accumulate = 2});
}
TEST(FullyShard, ActivationCheckpointedUnitTrainsAsOneDevice) {
  expect_one_device({.world = 3, .optimizer = Recipe::kAdamWGroups, .checkpointed = true});
}
TEST(FullyShard, CnnOnTwoRanksTrainsAsOneDevice) {
  expect_one_device({.world = 2, .optimizer = Recipe::kAdam, .cnn = true});
}

// A backward that fails part-way (here a hook on the output throws, on every rank, after the last
// unit has started gathering for backward) leaves no trace: the next steps train as if the
// failed one had never run.
TEST(FullyShard, AFailedBackwardLeavesTheNextStepsUntouched) {
  const Recipe r{.world = 2, .optimizer = Recipe::kAdam};
  std::vector<nn::Sequential> models;
  for (int rank = 0; rank < r.world; ++rank) {
    manual_seed(0);
    models.push_back(model_for(r));
    models.back().to(kFloat64);
    models.back().to(Device::cpu(rank));
  }
  const Data data = data_for(r);
  std::vector<double> result;
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        FullyShardedModule fsdp(std::move(models[size_t(rank)]), {.group = group});
        {
          Tensor out = fsdp(data.first.narrow(0, 0, kBatch).to(dev));
          out.register_hook([](const Tensor&) -> Tensor { throw ValueError("a failing hook"); });
          EXPECT_THROW(cross_entropy(out, data.second.narrow(0, 0, kBatch).to(dev)).backward(),
                       ValueError);
        }
        train(
            r, data, fsdp, rank, kBatch, dev, [&](const Tensor& x) { return fsdp(x); }, [] {},
            [](bool) { return 0; });
        nn::StateDict whole = fsdp.full_state_dict(/*rank0_only=*/true);
        if (rank == 0) {
          nn::Sequential m = model_for(r);
          m.to(kFloat64);
          for (auto& [name, t] : whole) t = t.to(Device::cpu());
          m.load_state_dict(whole);
          result = flat_params(m);
        }
      },
      r.world);
  tandem::testing::expect_same_params(result, one_device(r));
}

// Mixed precision (FSDP2's MixedPrecisionPolicy): float32 shards, all-gathered and computed in
// bfloat16, gradients reduce-scattered in float32. Three SGD steps on 2 ranks against three
// float32 steps on one device: bfloat16 keeps 8 significant bits, so the parameters agree only to
// a stated tolerance, the largest difference over the largest step any parameter took.
TEST(FullyShard, BFloat16ParametersWithFloat32ReductionTrackFloat32Training) {
  const Recipe r{.world =
                     2};  // SGD: Adam would turn the rounding of tiny gradients into whole steps
  const auto d = tandem::testing::synthetic_data(kSteps * r.world * kBatch);
  manual_seed(0);
  nn::Sequential reference = model_for(r);
  const std::vector<double> before = flat_params(reference);
  std::vector<nn::Sequential> models;
  for (int rank = 0; rank < r.world; ++rank) {
    models.push_back(nn::clone(reference));
    models.back().to(Device::cpu(rank));
  }
  train(
      r, d, reference, 0, r.world * kBatch, Device::cpu(),
      [&](const Tensor& x) { return reference(x); }, [] {}, [](bool) { return 0; });
  std::vector<double> low;
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        FullyShardedModule fsdp(
            std::move(models[size_t(rank)]),
            {.group = group, .param_dtype = kBFloat16, .reduce_dtype = kFloat32});
        train(
            r, d, fsdp, rank, kBatch, Device::cpu(rank),
            [&](const Tensor& x) {
              const Tensor out = fsdp(x);
              EXPECT_EQ(out.dtype(), kBFloat16);
              return out.to(kFloat32);
            },
            [] {}, [](bool) { return 0; });
        for (const Tensor& p : fsdp.parameters()) {
          EXPECT_EQ(p.dtype(), kFloat32) << "the shards stay float32";
          EXPECT_EQ(p.grad().dtype(), kFloat32);
        }
        nn::StateDict whole = fsdp.full_state_dict();
        if (rank == 0) {
          nn::Sequential m = model_for(r);
          for (auto& [name, t] : whole) t = t.to(Device::cpu());
          m.load_state_dict(whole);
          low = flat_params(m);
        }
      },
      r.world);
  const std::vector<double> reference_after = flat_params(reference);
  double largest_step = 0, worst = 0;
  for (size_t i = 0; i < low.size(); ++i) {
    largest_step = std::max(largest_step, std::abs(reference_after[i] - before[i]));
    worst = std::max(worst, std::abs(low[i] - reference_after[i]));
  }
  std::printf("fully_shard bf16/fp32: worst parameter difference %.3g, %.3g of the largest step\n",
              worst, worst / largest_step);
  EXPECT_LT(worst / largest_step, 0.25);
  EXPECT_GT(worst, 0) << "bfloat16 compute must differ from float32 somewhere";
}

}  // namespace
}  // namespace tandem::parallel::fsdp_test
