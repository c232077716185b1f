// tests/parallel/zero_test.cpp — ZeRO stages 1 and 2 (DDP with a zero_optimizer) train as one
// device (what they keep and send, checkpoints and misuse: zero_accounting_test.cpp): N ranks, each
// with batch b, end with the parameters one device reaches with batch N·b, in float64 to DDP's
// tolerance (1e-10 absolute + 1e-8 relative); with 2 ranks, bit for bit what DDP reaches. Ranks are
// threads on cpu:0..N-1 (the in-process communicator), so each rank's memory is counted on its own
// device; one test per process backend checks the collectives there.
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::Mlp;

constexpr int64_t kZeroBatch = 8;  // per rank
constexpr int kSteps = 3;

struct Recipe {
  int world = 2;
  int stage = 1;  // 0: plain DDP
  enum { kSgd, kAdam, kAdamWGroups } optimizer = kSgd;
  bool clip = false;    // clip the gradient norm to 0.5 (it is about 2 here, so it bites)
  int accumulate = 1;   // micro-batches per step (no_sync on all but the last)
  bool unused = false;  // the model has a layer that never gets a gradient (find_unused)
};

struct MlpWithUnused : Mlp {  // Mlp plus a layer no loss reaches
  nn::Linear spare{10, 10};
  void visit(nn::Visitor& v) override {
    Mlp::visit(v);
    v("spare", spare);
  }
};

// The optimizer of a recipe over `params` (groups: AdamW, decay on matrices, and a schedule).
template <typename Make>
std::unique_ptr<optim::Optimizer> make(const Recipe& r, nn::Module& m, Make&& zero) {
  switch (r.optimizer) {
    case Recipe::kSgd:
      return zero.template sgd<optim::SGD>(m.parameters(),
                                           optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    case Recipe::kAdam:
      return zero.template sgd<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 1e-2});
    default:
      return zero.template groups<optim::AdamW>(
          optim::adamw_groups(m.named_parameters(), {.lr = 1e-2, .weight_decay = 0.1}));
  }
}

struct OneDevice {  // plain optimizers
  template <typename Opt, typename O>
  std::unique_ptr<optim::Optimizer> sgd(std::vector<Tensor> p, O o) {
    return std::make_unique<Opt>(std::move(p), o);
  }
  template <typename Opt>
  std::unique_ptr<optim::Optimizer> groups(std::vector<typename Opt::Group> g) {
    return std::make_unique<Opt>(std::move(g));
  }
};

struct Sharded {  // zero_optimizer over a DDP's shards
  DistributedDataParallelBase* ddp;
  template <typename Opt, typename O>
  std::unique_ptr<optim::Optimizer> sgd(std::vector<Tensor> p, O o) {
    return zero_optimizer<Opt>(*ddp, p, o);
  }
  template <typename Opt>
  std::unique_ptr<optim::Optimizer> groups(std::vector<typename Opt::Group> g) {
    return zero_optimizer<Opt>(*ddp, std::move(g));
  }
};

using Data = std::pair<Tensor, Tensor>;
// The recipe's images (float64) and labels. Made before any rank thread starts: it seeds and
// draws from the global generator, which threads drawing at once would interleave.
Data data_for(const Recipe& r) {
  const auto d = tandem::testing::synthetic_data(kSteps * r.accumulate * r.world * kZeroBatch);
  return {d.first.to(kFloat64), d.second};
}

// Trains for kSteps on rows [rank·per_rank, ...) of each global batch; `pass(x, y, last)` runs
// one micro-batch's forward and backward, `clip()` clips.
template <typename Pass, typename Clip>
void train(const Recipe& r, const Data& data, optim::Optimizer& opt, int rank, int64_t per_rank,
           Device dev, Pass&& pass, Clip&& clip) {
  const Tensor& x = data.first;
  std::unique_ptr<optim::LRScheduler> schedule;
  if (r.optimizer == Recipe::kAdamWGroups)
    schedule = std::make_unique<optim::WarmupCosineLR>(opt, 1, kSteps, 1e-3);
  int64_t start = 0;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    for (int m = 0; m < r.accumulate; ++m) {
      const int64_t at = start + rank * per_rank;
      pass(x.narrow(0, at, per_rank).to(dev), data.second.narrow(0, at, per_rank).to(dev),
           m + 1 == r.accumulate);
      start += r.world * kZeroBatch;
    }
    if (r.clip) clip();
    opt.step();
    if (schedule) schedule->step();
  }
}

template <typename M>
std::vector<double> one_device(const Recipe& r) {
  manual_seed(0);
  M model;
  model.to(kFloat64);
  auto opt = make(r, model, OneDevice{});
  train(
      r, data_for(r), *opt, 0, r.world * kZeroBatch, Device::cpu(),
      [&](const Tensor& x, const Tensor& y, bool) {
        cross_entropy(model.forward(x), y).backward();
      },
      [&] { optim::clip_grad_norm_(model.parameters(), 0.5); });
  return tandem::testing::flat_params(model);
}

// Rank 0's parameters after training with DDP (stage 0) or ZeRO over threads; every rank's must
// be the same (checked).
template <typename M>
std::vector<double> sharded(const Recipe& r) {
  std::vector<std::unique_ptr<M>> models;
  for (int rank = 0; rank < r.world; ++rank) {
    manual_seed(rank == 0 ? 0 : 100 + rank);  // DDP must copy rank 0's weights
    models.push_back(std::make_unique<M>());
    models.back()->to(kFloat64);
    models.back()->to(Device::cpu(rank));
  }
  const Data data = data_for(r);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        M& model = *models[size_t(rank)];
        DistributedDataParallel ddp(model, {.group = group,
                                            .bucket_cap_mb = 0.05,
                                            .first_bucket_mb = 0.01,
                                            .find_unused_parameters = r.unused,
                                            .zero_stage = r.stage});
        auto opt = r.stage ? make(r, model, Sharded{&ddp}) : make(r, model, OneDevice{});
        train(
            r, data, *opt, rank, kZeroBatch, Device::cpu(rank),
            [&](const Tensor& x, const Tensor& y, bool last) {
              if (last) return cross_entropy(ddp(x), y).backward();
              auto guard = ddp.no_sync();
              cross_entropy(ddp(x), y).backward();
            },
            [&] {
              clip_grad_norm_(*ddp.placements(), 0.5);  // the pieces' or the whole model's
            });
      },
      r.world);
  for (auto& m : models) m->to(Device::cpu());
  for (int rank = 1; rank < r.world; ++rank)
    EXPECT_EQ(tandem::testing::flat_params(*models[size_t(rank)]),
              tandem::testing::flat_params(*models[0]))
        << "rank " << rank << " ended with other parameters than rank 0";
  return tandem::testing::flat_params(*models[0]);
}

template <typename M = Mlp>
void expect_one_device(const Recipe& r) {
  tandem::testing::expect_same_params(sharded<M>(r), one_device<M>(r));
}

TEST(Zero, Stage1WithSgdTrainsAsOneDevice) { expect_one_device({.stage = 1}); }
TEST(Zero, Stage2WithSgdTrainsAsOneDevice) { expect_one_device({.stage = 2}); }
TEST(Zero, Stage1WithAdamOnThreeRanksTrainsAsOneDevice) {
  expect_one_device({.world = 3, .stage = 1, .optimizer = Recipe::kAdam});
}
TEST(Zero, Stage2WithAdamWGroupsScheduleAndClippingOnFourRanksTrainsAsOneDevice) {
  expect_one_device({.world = 4, .stage = 2, .optimizer = Recipe::kAdamWGroups, .clip = true});
}
TEST(Zero, Stage1WithAdamWGroupsAndScheduleTrainsAsOneDevice) {
  expect_one_device({.stage = 1, .optimizer = Recipe::kAdamWGroups});
}
TEST(Zero, Stage2WithGradientAccumulationTrainsAsOneDevice) {
  expect_one_device({.world = 3, .stage = 2, .optimizer = Recipe::kAdam, .accumulate = 2});
}
TEST(Zero, UnusedParametersGetNoUpdateAsOnOneDevice) {
  // AdamW decays every parameter it steps: a spare layer that got a zero gradient would shrink.
  expect_one_device<MlpWithUnused>(
      {.world = 3, .stage = 2, .optimizer = Recipe::kAdamWGroups, .unused = true});
}

// The same over processes, through each CPU backend's reduce-scatter and all-gather (over shared
// memory: where the gradients and parameters lie, with no bucket buffers).
class ZeroOverProcesses : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Rank 0's parameters after r under DDP (stage 0) or ZeRO, over processes on `backend`.
std::vector<double> over_processes(const Recipe& r, const std::string& backend) {
  tandem::testing::TempDir dir;
  const std::string out = dir.file("params.bin");
  spawn(
      [&](int rank) {
        init_process_group({.backend = backend, .timeout = 60s});
        manual_seed(rank == 0 ? 0 : 100 + rank);
        Mlp model;
        model.to(kFloat64);
        DistributedDataParallel ddp(
            model, {.bucket_cap_mb = 0.05, .first_bucket_mb = 0.01, .zero_stage = r.stage});
        auto opt = r.stage ? make(r, model, Sharded{&ddp}) : make(r, model, OneDevice{});
        train(
            r, data_for(r), *opt, rank, kZeroBatch, Device::cpu(),
            [&](const Tensor& x, const Tensor& y, bool) { cross_entropy(ddp(x), y).backward(); },
            [&] { clip_grad_norm_(*ddp.placements(), 0.5); });
        if (rank == 0) tandem::testing::write_doubles(out, tandem::testing::flat_params(model));
        destroy_process_group();
      },
      r.world);
  return tandem::testing::read_doubles(out);
}

TEST_P(ZeroOverProcesses, WithAdamWGroupsAndClippingOnThreeRanksTrainsAsOneDevice) {
  const auto& [backend, stage] = GetParam();
  const Recipe r{.world = 3, .stage = stage, .optimizer = Recipe::kAdamWGroups, .clip = true};
  tandem::testing::expect_same_params(over_processes(r, backend), one_device<Mlp>(r));
}

INSTANTIATE_TEST_SUITE_P(Backends, ZeroOverProcesses,
                         ::testing::Combine(::testing::Values("shm", "gloo"),
                                            ::testing::Values(1, 2)));

// Over shared memory the reduce-scatter adds in rank order, as the all-reduce does: DDP's bits.
TEST(Zero, OverSharedMemoryThreeRanksReachDdpsParametersBitForBit) {
  const Recipe r{.world = 3, .stage = 0, .optimizer = Recipe::kAdamWGroups};
  const std::vector<double> ddp = over_processes(r, "shm");
  EXPECT_EQ(over_processes({.world = 3, .stage = 1, .optimizer = Recipe::kAdamWGroups}, "shm"),
            ddp);
  EXPECT_EQ(over_processes({.world = 3, .stage = 2, .optimizer = Recipe::kAdamWGroups}, "shm"),
            ddp);
}

// Reduce-scatter then all-gather adds the same two numbers in the same order as all-reduce, and
// an element-wise optimizer does the same arithmetic on a piece as on the whole.
TEST(Zero, TwoRanksReachDdpsParametersBitForBit) {
  for (auto opt : {Recipe::kSgd, Recipe::kAdamWGroups}) {
    const std::vector<double> ddp = sharded<Mlp>({.stage = 0, .optimizer = opt});
    EXPECT_EQ(sharded<Mlp>({.stage = 1, .optimizer = opt}), ddp);
    EXPECT_EQ(sharded<Mlp>({.stage = 2, .optimizer = opt}), ddp);
  }
}

// Each rank's GradScaler sees only its shard's gradients: an inf in rank 1's must make every rank
// skip the step (the scaler's all_reduce sums the found-inf flags), or the ranks part ways.
TEST(Zero, AGradScalerSkipsTheStepOnEveryRankWhenOneShardOverflows) {
  auto models = tandem::testing::mlps_on_devices(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        Mlp& model = *models[size_t(rank)];
        DistributedDataParallel ddp(model, {.group = group, .zero_stage = 2});
        auto opt =
            zero_optimizer<optim::SGD>(ddp, model.parameters(), optim::SGDOptions{.lr = 0.1});
        optim::GradScaler scaler(
            {.init_scale = 1024, .all_reduce = [&](Tensor& t) { group->all_reduce(t)->wait(); }});
        const std::vector<double> before = tandem::testing::flat_params(model);
        auto backward = [&] {
          opt->zero_grad();
          scaler
              .scale(cross_entropy(ddp(randn({kZeroBatch, 784}, {.device = dev})),
                                   zeros({kZeroBatch}, {.dtype = kInt64, .device = dev})))
              .backward();
        };
        backward();
        if (rank == 1) opt->parameters().front().grad().narrow(0, 0, 1).fill_(INFINITY);
        scaler.step(*opt);
        EXPECT_TRUE(scaler.last_step_skipped()) << "rank " << rank;
        scaler.update();
        EXPECT_EQ(tandem::testing::flat_params(model), before) << "rank " << rank;
        EXPECT_EQ(scaler.get_scale(), 512);
        backward();
        scaler.step(*opt);
        EXPECT_FALSE(scaler.last_step_skipped()) << "rank " << rank;
        EXPECT_NE(tandem::testing::flat_params(model), before) << "rank " << rank;
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel
