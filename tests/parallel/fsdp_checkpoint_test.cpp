// tests/parallel/fsdp_checkpoint_test.cpp — sharded checkpoints (parallel/fsdp/
// sharded_checkpoint.h): written by every rank at once, read back on another number of ranks, and
// the run resumed from them ends where one device does; a rank that cannot write makes every rank
// fail and leaves the previous checkpoint in place. Ranks are threads on cpu:0..N-1.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/fsdp/sharded_checkpoint.h>

#include <filesystem>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::flat_params;
namespace fs = std::filesystem;

constexpr int64_t kGlobal = 12;  // rows per step, split over the ranks

// 784-64-30-10: 30 rows cut 10, 10, 10 on 3 ranks and 15, 15 on 2; 10 rows 4, 4, 2 and 5, 5.
nn::Sequential checkpoint_mlp() {
  return nn::Sequential{{"flatten", nn::Flatten()}, {"fc1", nn::Linear(784, 64)},
                        {"relu1", nn::ReLU()},      {"fc2", nn::Linear(64, 30)},
                        {"relu2", nn::ReLU()},      {"fc3", nn::Linear(30, 10)}};
}

std::vector<nn::Sequential> mlps(int world) {
  return tandem::testing::sequentials_on_devices(world, kFloat64, checkpoint_mlp);
}

// Two Adam steps on 3 ranks saved as step 2, then the third step on 2 ranks loaded from it: the
// parameters of three steps on one device.
TEST(ShardedCheckpoint, WrittenByThreeRanksResumesOnTwo) {
  const auto data = tandem::testing::synthetic_data(3 * kGlobal);
  const Tensor x = data.first.to(kFloat64), y = data.second;
  manual_seed(0);
  nn::Sequential reference = checkpoint_mlp();
  reference.to(kFloat64);
  const nn::StateDict initial = nn::clone(reference).state_dict();
  optim::Adam ref_opt(reference.parameters(), {.lr = 1e-2});
  for (int s = 0; s < 3; ++s) {
    ref_opt.zero_grad();
    cross_entropy(reference(x.narrow(0, s * kGlobal, kGlobal)), y.narrow(0, s * kGlobal, kGlobal))
        .backward();
    ref_opt.step();
  }
  tandem::testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  std::vector<double> resumed;
  auto run = [&](int world, int first, int steps) {
    auto models = mlps(world);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          FullyShardedModule fsdp(std::move(models[size_t(rank)]), {.group = group});
          optim::Adam opt(fsdp.parameters(), {.lr = 1e-2});
          if (first == 0)
            fsdp.load_full_state_dict(initial);
          else
            EXPECT_EQ(load_sharded_checkpoint(ckpt, fsdp, &opt), first);
          const int64_t per = kGlobal / world;
          for (int s = first; s < first + steps; ++s) {
            opt.zero_grad();
            const int64_t at = s * kGlobal + rank * per;
            cross_entropy(fsdp(x.narrow(0, at, per).to(dev)), y.narrow(0, at, per).to(dev))
                .backward();
            opt.step();
          }
          if (first == 0) save_sharded_checkpoint(ckpt, first + steps, fsdp, &opt);
          nn::StateDict whole = fsdp.full_state_dict(/*rank0_only=*/true);
          if (rank == 0) {
            nn::Sequential m = checkpoint_mlp();
            m.to(kFloat64);
            for (auto& [name, t] : whole) t = t.to(Device::cpu());
            m.load_state_dict(whole);
            resumed = flat_params(m);
          }
        },
        world);
  };
  run(3, 0, 2);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fs::exists(fs::path(ckpt) / "step-2" /
                           ("rank-" + std::to_string(r) + "-of-3.safetensors")));
  EXPECT_TRUE(fs::exists(fs::path(ckpt) / "step-2" / "index.json"));
  run(2, 2, 1);
  tandem::testing::expect_same_params(resumed, flat_params(reference));
}

// Rank 1's file cannot be written (a directory stands where it goes): both ranks throw a
// DataError naming rank 1, and `latest` still names step 1.
TEST(ShardedCheckpoint, ARankThatCannotWriteFailsEveryRankAndKeepsTheLastCheckpoint) {
  tandem::testing::TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  auto models = mlps(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        FullyShardedModule fsdp(std::move(models[size_t(group->rank())]), {.group = group});
        save_sharded_checkpoint(ckpt, 1, fsdp);
        if (group->rank() == 1)
          fs::create_directories(fs::path(ckpt) / "step-2" / "rank-1-of-2.safetensors");
        group->barrier()->wait();
        const std::string msg = tandem::testing::error_message<DataError>(
            [&] { save_sharded_checkpoint(ckpt, 2, fsdp); });
        EXPECT_THAT(msg, ::testing::HasSubstr("rank 1 could not write"));
        EXPECT_EQ(load_sharded_checkpoint(ckpt, fsdp), 1);
      },
      2);
}

TEST(ShardedCheckpoint, AMissingCheckpointIsADataErrorNamingTheFile) {
  tandem::testing::TempDir dir;
  auto models = mlps(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        FullyShardedModule fsdp(std::move(models[size_t(group->rank())]), {.group = group});
        const std::string msg = tandem::testing::error_message<DataError>(
            [&] { load_sharded_checkpoint(dir.file("none"), fsdp); });
        EXPECT_THAT(msg, ::testing::HasSubstr("none/latest"));
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel
