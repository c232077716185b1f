// tests/mpi/mpi_comm_test.cpp — the MPI backend, run by ctest under
// `mpirun --allow-run-as-root --oversubscribe -np N` (tests/CMakeLists.txt): every rank runs every
// test, and each test is collective (all ranks call the same collectives). The collective suite,
// the default backend under mpirun, ranks taken from mpirun's environment (by the process group
// and by a default DistributedSampler), ring and Ulysses attention, and DDP and ZeRO over MPI
// training as one device.
#include <tandem/data/distributed_sampler.h>
#include <tandem/parallel/comm/mpi_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/launcher_env.h>
#include <tandem/parallel/process_group.h>

#include "parallel/collective_suite.h"
#include "parallel/context_attention_check.h"
#include "parallel/ddp_models.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;

TEST(MpiCollectives, PassTheCollectiveSuite) {
  auto comm = init_process_group({.backend = "mpi", .timeout = 60s});
  EXPECT_EQ(comm->backend(), "mpi");
  EXPECT_EQ(comm->rank(), env_rank()) << "the rank mpirun gave (OMPI_COMM_WORLD_RANK)";
  EXPECT_EQ(comm->size(), env_world_size());
  EXPECT_NO_THROW(tandem::testing::check_collectives(*comm));
  destroy_process_group();
}

TEST(MpiCollectives, AreTheDefaultUnderMpirunWithoutARendezvousAddress) {
  ASSERT_TRUE(env_master_addr().empty()) << "run this test under mpirun without MASTER_ADDR";
  auto comm = init_process_group({.timeout = 60s});
  EXPECT_EQ(comm->backend(), "mpi");
  Tensor t = full({3}, double(comm->rank()));
  comm->all_reduce(t, ReduceOp::Max)->wait();
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, float(comm->size() - 1)));
  destroy_process_group();
}

TEST(MpiCollectives, RingAndUlyssesAttentionComputeOneDevicesAttention) {
  auto comm = init_process_group({.backend = "mpi", .timeout = 60s});
  EXPECT_LE(tandem::testing::context_attention_error(*comm), 1e-12);
  destroy_process_group();
}

TEST(MpiCollectives, AGroupOfTheWrongSizeIsAClearError) {
  EXPECT_THROW(init_process_group({.backend = "mpi", .world_size = 99}), DistributedError);
}

// mpirun sets no RANK or WORLD_SIZE: a default DistributedSampler takes mpirun's rank and world
// (OMPI_COMM_WORLD_*) before the group exists and the group's after, and so this rank's share
// only, not the whole epoch as rank 0 of 1.
TEST(MpiCollectives, ADefaultSamplerTakesMpirunsRankAndWorld) {
  ASSERT_TRUE(std::getenv("RANK") == nullptr && std::getenv("WORLD_SIZE") == nullptr)
      << "run this test under mpirun alone";
  const data::DistributedSampler before(12, {.shuffle = false});
  auto comm = init_process_group({.backend = "mpi", .timeout = 60s});
  const int n = comm->size(), r = comm->rank();
  ASSERT_GE(n, 2) << "run this test under mpirun -np 2 or more";
  const data::DistributedSampler after(12, {.shuffle = false});
  std::vector<int64_t> share;  // 12 divides by 2 and by 3: no padding
  for (int64_t i = r; i < 12; i += n) share.push_back(i);
  for (const data::DistributedSampler* s : {&before, &after}) {
    EXPECT_EQ(s->rank(), r);
    EXPECT_EQ(s->num_replicas(), n);
    EXPECT_EQ(s->indices(0), share);
  }
  Tensor total = full({1}, double(after.size()), {.dtype = kInt64});
  comm->all_reduce(total)->wait();
  EXPECT_EQ(total.item(), 12.0) << "the ranks' shares add up to the dataset once";
  destroy_process_group();
}

// Every rank trains its share of each batch with DDP over MPI, then with ZeRO-2 (reduce-scatter
// and all-gather); each also trains the whole batch alone, and the two must agree (float64, 1e-10
// absolute + 1e-8 relative).
// new_group over MPI (MPI_Comm_split): the collective suite within a sub-group (ranks {0, 2} of
// 3, rank 1 getting nullptr; both ranks of 2), the world's and a sub-group's collectives in
// flight together, and a DeviceMesh whose groups reduce over their own ranks only.
TEST(MpiCollectives, SubGroupsAndMeshesPassTheSuite) {
  auto world = init_process_group({.backend = "mpi", .timeout = 60s});
  const int n = world->size(), rank = world->rank();
  const std::vector<int> members = n == 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
  const bool member = std::find(members.begin(), members.end(), rank) != members.end();
  const std::shared_ptr<Communicator> sub = world->new_group(members);
  ASSERT_EQ(sub != nullptr, member) << "rank " << rank;
  if (sub) {
    EXPECT_EQ(sub->backend(), "mpi");
    EXPECT_EQ(sub->size(), 2);
    EXPECT_NO_THROW(tandem::testing::check_collectives(*sub));
  }
  Tensor a = full({100'003}, double(rank)), b = full({7}, double(rank));
  const WorkPtr wa = world->all_reduce(a);
  const WorkPtr wb = sub ? sub->all_reduce(b) : nullptr;
  wa->wait();
  if (wb) wb->wait();
  EXPECT_EQ(a.max().item(), double(n * (n - 1) / 2));
  if (sub) {
    EXPECT_EQ(b.max().item(), double(members[0] + members[1]));
  }
  const DeviceMesh mesh(world, {n, 1}, {"dp", "tp"});
  Tensor c = full({3}, double(rank)), d = full({3}, double(rank));
  mesh.group("dp")->all_reduce(c)->wait();
  mesh.group("tp")->all_reduce(d)->wait();
  EXPECT_EQ(c.min().item(), double(n * (n - 1) / 2));
  EXPECT_EQ(d.min().item(), double(rank));
  world->barrier()->wait();
  destroy_process_group();
}

TEST(MpiCollectives, DdpAndZeroOverMpiTrainAsOneDevice) {
  auto comm = init_process_group({.backend = "mpi", .timeout = 60s});
  const int world = comm->size(), rank = comm->rank();
  constexpr int kBatch = 8, kSteps = 3;
  const auto data = tandem::testing::synthetic_data(kSteps * world * kBatch);
  // Not a structured binding: clang does not let lambdas capture those.
  const Tensor x = data.first.to(kFloat64), y = data.second;
  for (int stage : {0, 2}) {
    manual_seed(0);
    tandem::testing::Mlp reference;
    reference.to(kFloat64);
    manual_seed(rank == 0 ? 0 : 100 + rank);  // DDP must copy rank 0's weights
    tandem::testing::Mlp model;
    model.to(kFloat64);
    DistributedDataParallel ddp(
        model, {.bucket_cap_mb = 0.05, .first_bucket_mb = 0.01, .zero_stage = stage});
    auto opt =
        stage ? zero_optimizer<optim::Adam>(ddp, model.parameters(), optim::AdamOptions{.lr = 1e-2})
              : tandem::testing::make_optimizer(model, true);
    auto ref_opt = tandem::testing::make_optimizer(reference, true);
    for (int s = 0; s < kSteps; ++s) {
      const int64_t at = int64_t(s) * world * kBatch;
      opt->zero_grad();
      cross_entropy(ddp(x.narrow(0, at + rank * kBatch, kBatch)),
                    y.narrow(0, at + rank * kBatch, kBatch))
          .backward();
      opt->step();
      ref_opt->zero_grad();
      cross_entropy(reference.forward(x.narrow(0, at, world * kBatch)),
                    y.narrow(0, at, world * kBatch))
          .backward();
      ref_opt->step();
    }
    SCOPED_TRACE("zero stage " + std::to_string(stage));
    tandem::testing::expect_same_params(tandem::testing::flat_params(model),
                                        tandem::testing::flat_params(reference));
  }
  destroy_process_group();
}

// fully_shard over MPI's all-gather and reduce-scatter (mean: SUM then divide in the backend): a
// Sequential MLP with 30- and 10-row layers, so shards are unequal on 3 ranks.
TEST(MpiCollectives, FullyShardOverMpiTrainsAsOneDevice) {
  auto comm = init_process_group({.backend = "mpi", .timeout = 60s});
  const int world = comm->size(), rank = comm->rank();
  constexpr int kBatch = 8, kSteps = 3;
  const auto data = tandem::testing::synthetic_data(kSteps * world * kBatch);
  const Tensor x = data.first.to(kFloat64), y = data.second;
  const auto mlp = [] {
    nn::Sequential m{{"flatten", nn::Flatten()},
                     {"fc1", nn::Linear(784, 30)},
                     {"relu", nn::ReLU()},
                     {"fc2", nn::Linear(30, 10)}};
    m.to(kFloat64);
    return m;
  };
  manual_seed(0);
  nn::Sequential reference = mlp();
  manual_seed(rank == 0 ? 0 : 100 + rank);  // fully_shard must copy rank 0's weights
  FullyShardedModule fsdp(mlp());
  optim::Adam opt(fsdp.parameters(), {.lr = 1e-2}), ref_opt(reference.parameters(), {.lr = 1e-2});
  for (int s = 0; s < kSteps; ++s) {
    const int64_t at = int64_t(s) * world * kBatch;
    opt.zero_grad();
    cross_entropy(fsdp(x.narrow(0, at + rank * kBatch, kBatch)),
                  y.narrow(0, at + rank * kBatch, kBatch))
        .backward();
    opt.step();
    ref_opt.zero_grad();
    cross_entropy(reference(x.narrow(0, at, world * kBatch)), y.narrow(0, at, world * kBatch))
        .backward();
    ref_opt.step();
  }
  nn::Sequential whole = mlp();
  whole.load_state_dict(fsdp.full_state_dict());
  tandem::testing::expect_same_params(tandem::testing::flat_params(whole),
                                      tandem::testing::flat_params(reference));
  destroy_process_group();
}

}  // namespace
}  // namespace tandem::parallel
