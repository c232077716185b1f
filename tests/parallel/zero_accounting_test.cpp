// tests/parallel/zero_accounting_test.cpp — what ZeRO keeps on each device and sends, measured
// against the formulas and against DDP; the consolidated state dict (equal to one device's, and
// loaded on another number of ranks); and misuse, which every rank reports alike. Ranks are threads
// on cpu:0..N-1, each device's memory counted on its own.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/state_bytes.h>
#include <tandem/parallel/ddp/zero_optimizer.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::Mlp;
using tandem::testing::mlps_on_devices;

constexpr int64_t kBatch = 8;  // per rank

// What each rank holds after a step with Adam beyond the parameters themselves, in float64 (8
// bytes an element; Ψ parameters, N = 4 ranks): DDP keeps every gradient (8Ψ) and Adam's two
// moments (16Ψ), and no bucket (the threads' all_reduce_coalesced reduces the gradients in
// place; over Gloo a bucket copy adds 8Ψ); ZeRO-1 the bucket buffers (8Ψ, its averaged chunk
// inside) and the moments of its shard (16Ψ/N); ZeRO-2 its averaged chunk (8Ψ/N) and the shard's
// moments. Padding adds under N elements a bucket, hence the 1 % margin.
TEST(Zero, EachRankKeepsWhatTheFormulaSays) {
  constexpr int kWorld = 4;
  const double psi = double(tandem::testing::flat_params(*std::make_unique<Mlp>()).size());
  for (int stage : {0, 1, 2}) {
    auto models = mlps_on_devices(kWorld, kFloat64);
    std::vector<double> kept(kWorld);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          const int64_t before = memory_stats(dev).allocated_bytes;  // the parameters
          Mlp& model = *models[size_t(rank)];
          DistributedDataParallel ddp(model, {.group = group, .zero_stage = stage});
          auto opt =
              stage ? zero_optimizer<optim::Adam>(ddp, model.parameters(), optim::AdamOptions{})
                    : std::unique_ptr<optim::Optimizer>(
                          std::make_unique<optim::Adam>(model.parameters()));
          {
            Tensor x = randn({kBatch, 784}, {.dtype = kFloat64, .device = dev});
            Tensor y = zeros({kBatch}, {.dtype = kInt64, .device = dev});
            cross_entropy(ddp(x), y).backward();
          }
          opt->step();
          // Once every rank is here, every rank has left the step's collectives, whose
          // meetings hold the tensors they exchanged until the last rank leaves.
          group->barrier()->wait();
          kept[size_t(rank)] = double(memory_stats(dev).allocated_bytes - before);
        },
        kWorld);
    const double expected = stage == 0   ? 24 * psi
                            : stage == 1 ? 8 * psi + 16 * psi / kWorld
                                         : 24 * psi / kWorld;
    for (int rank = 0; rank < kWorld; ++rank)
      EXPECT_NEAR(kept[size_t(rank)], expected, 0.01 * expected)
          << "stage " << stage << ", rank " << rank << " (Ψ = " << psi << ")";
  }
}

// gradient_as_bucket_view: .grad is the bucket's slice, so DDP keeps the gradients once (24Ψ in
// float64 with Adam: 8 bucket + 16 moments; the default keeps as much here, reducing .grad in
// place, and 32Ψ where it packs a bucket) and not one bit of training changes (two steps, the
// second accumulating over two micro-batches with no_sync).
TEST(Zero, GradientAsBucketViewKeepsTheGradientsOnceAndChangesNoBit) {
  constexpr int kWorld = 2;
  const double psi = double(tandem::testing::flat_params(*std::make_unique<Mlp>()).size());
  std::vector<std::vector<double>> params(2);
  for (bool view : {false, true}) {
    auto models = mlps_on_devices(kWorld, kFloat64, 0);
    std::vector<double> kept(kWorld);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          const int64_t before = memory_stats(dev).allocated_bytes;  // the parameters
          Mlp& model = *models[size_t(rank)];
          DistributedDataParallel ddp(model, {.group = group, .gradient_as_bucket_view = view});
          optim::Adam opt(model.parameters(), {.lr = 1e-2});
          for (int step = 0; step < 2; ++step) {
            opt.zero_grad();
            for (int micro = 0; micro <= step; ++micro) {
              Tensor x = full({kBatch, 784}, 0.01 * (step + micro + 1) * (rank + 1),
                              {.dtype = kFloat64, .device = dev});
              Tensor y = zeros({kBatch}, {.dtype = kInt64, .device = dev});
              if (micro == step) {
                cross_entropy(ddp(x), y).backward();
                continue;
              }
              auto quiet = ddp.no_sync();  // accumulate in .grad: the bucket's slice, in place
              cross_entropy(ddp(x), y).backward();
            }
            opt.step();
            group->barrier()->wait();
            if (step == 0) kept[size_t(rank)] = double(memory_stats(dev).allocated_bytes - before);
          }
          if (rank == 0) params[view] = tandem::testing::flat_params(model);
        },
        kWorld);
    for (int rank = 0; rank < kWorld; ++rank)
      EXPECT_NEAR(kept[size_t(rank)], 24 * psi, 0.01 * 24 * psi)
          << "gradient_as_bucket_view " << view << ", rank " << rank;
  }
  EXPECT_EQ(params[1], params[0]);
}

// ZeRO sends what DDP sends: a reduce-scatter and an all-gather are each half an all-reduce
// ((N-1)/N of the bucket), up to the padding. Counted by the communicator (nccl-tests' rule).
TEST(Zero, EachRankSendsWhatDdpSends) {
  constexpr int kWorld = 4;
  std::map<int, uint64_t> bytes;  // stage -> rank 0's bytes for one step
  for (int stage : {0, 1, 2}) {
    auto models = mlps_on_devices(kWorld);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          Mlp& model = *models[size_t(rank)];
          DistributedDataParallel ddp(model,
                                      {.group = group, .bucket_cap_mb = 0.05, .zero_stage = stage});
          auto opt = stage ? zero_optimizer<optim::SGD>(ddp, model.parameters(),
                                                        optim::SGDOptions{.lr = 0.1})
                           : std::unique_ptr<optim::Optimizer>(
                                 std::make_unique<optim::SGD>(model.parameters()));
          const uint64_t before = group->stats().total_bytes();
          cross_entropy(ddp(randn({kBatch, 784}, {.device = dev})),
                        zeros({kBatch}, {.dtype = kInt64, .device = dev}))
              .backward();
          opt->step();
          if (rank == 0) bytes[stage] = group->stats().total_bytes() - before;
        },
        kWorld);
  }
  EXPECT_GT(bytes[0], 0u);
  for (int stage : {1, 2})
    EXPECT_NEAR(double(bytes[stage]), double(bytes[0]), 1e-3 * double(bytes[0]))
        << "stage " << stage;
}

// A checkpoint is the state one optimizer over the whole model would have, whatever the number of
// ranks: ZeRO-2 on 3 ranks trains 2 steps of a 24-row batch, and its consolidated state dict
// equals one device's; ZeRO-1 on 2 ranks loads it and takes the third step, ending where one device
// does.
TEST(Zero, AFullStateDictEqualsOneDevicesAndResumesOnAnotherWorldSize) {
  constexpr int64_t kGlobal = 24;
  const auto data = tandem::testing::synthetic_data(3 * kGlobal);
  const Tensor x = data.first.to(kFloat64), y = data.second;
  manual_seed(0);
  Mlp reference;
  reference.to(kFloat64);
  optim::Adam ref_opt(reference.parameters(), {.lr = 1e-2});
  optim::OptimizerState after_two;
  for (int s = 0; s < 3; ++s) {
    if (s == 2) {
      after_two = ref_opt.state_dict();
      for (auto& [key, t] : after_two.tensors) t = t.clone();  // the next step updates in place
    }
    ref_opt.zero_grad();
    cross_entropy(reference.forward(x.narrow(0, s * kGlobal, kGlobal)),
                  y.narrow(0, s * kGlobal, kGlobal))
        .backward();
    ref_opt.step();
  }
  // Trains steps [first, last) on `world` threads from `models`, loading `state` first if any.
  auto run = [&](std::vector<std::unique_ptr<Mlp>>& models, int stage, int first, int last,
                 const optim::OptimizerState* state) {
    const int world = int(models.size());
    optim::OptimizerState saved;
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          const int64_t per = kGlobal / world;
          Mlp& model = *models[size_t(rank)];
          DistributedDataParallel ddp(model, {.group = group, .zero_stage = stage});
          auto opt =
              zero_optimizer<optim::Adam>(ddp, model.parameters(), optim::AdamOptions{.lr = 1e-2});
          if (state) opt->load_state_dict(*state);
          for (int s = first; s < last; ++s) {
            opt->zero_grad();
            const int64_t at = s * kGlobal + rank * per;
            cross_entropy(ddp(x.narrow(0, at, per).to(dev)), y.narrow(0, at, per).to(dev))
                .backward();
            opt->step();
          }
          EXPECT_THROW(opt->state_dict(), ValueError);  // not consolidated yet
          opt->consolidate_state_dict();
          if (rank == 0) saved = opt->state_dict();
        },
        world);
    return saved;
  };
  std::vector<std::unique_ptr<Mlp>> three = mlps_on_devices(3, kFloat64, 0), two;
  const optim::OptimizerState saved = run(three, 2, 0, 2, nullptr);
  ASSERT_EQ(saved.tensors.size(), after_two.tensors.size());
  EXPECT_EQ(saved.param_groups_json, after_two.param_groups_json);
  for (size_t k = 0; k < saved.tensors.size(); ++k) {
    EXPECT_EQ(saved.tensors[k].first, after_two.tensors[k].first);
    EXPECT_TRUE(tandem::testing::all_close(saved.tensors[k].second.to(Device::cpu()),
                                           after_two.tensors[k].second, 1e-12, 1e-9))
        << saved.tensors[k].first;
  }
  for (int r = 0; r < 2; ++r) {
    two.push_back(std::make_unique<Mlp>());
    two.back()->to(kFloat64);
    NoGradGuard no_grad;
    auto from = three[0]->parameters(), to = two.back()->parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i].to(Device::cpu()));
    two.back()->to(Device::cpu(r));
  }
  run(two, 1, 2, 3, &saved);
  two[0]->to(Device::cpu());
  tandem::testing::expect_same_params(tandem::testing::flat_params(*two[0]),
                                      tandem::testing::flat_params(reference));
}

// The formulas `tandem train --ddp` prints beside what a rank holds (state_bytes.h).
TEST(Zero, StateBytesFollowTheFormulas) {
  const StateBytes ddp = state_bytes(0, 1000, 4, 2, 4), z1 = state_bytes(1, 1000, 4, 2, 4),
                   z2 = state_bytes(2, 1000, 4, 2, 4);
  EXPECT_EQ(ddp.total(), 4000 + 8000 + 8000);  // 20Ψ: .grad and its bucket copy
  EXPECT_EQ(z1.total(), 4000 + 4000 + 2000);   // 8Ψ + 8Ψ/N
  EXPECT_EQ(z2.total(), 4000 + 1000 + 2000);   // 4Ψ + 12Ψ/N
  EXPECT_THROW(state_bytes(4, 1000, 4, 2, 4), ValueError);
  EXPECT_EQ(state_bytes(3, 1000, 4, 2, 4).total(), 16.0 * 1000 / 4);
  // DDP reducing its buckets in place (shared memory, threads): .grad alone, 16Ψ.
  EXPECT_EQ(state_bytes(0, 1000, 4, 2, 4, /*bucket_copy=*/false).total(), 4000 + 4000 + 8000);
}

TEST(Zero, MisuseIsAClearError) {
  Mlp one, two, other;  // made before the threads, which would draw from one generator at once
  two.to(Device::cpu(1));
  Mlp* models[] = {&one, &two};
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        Mlp& model = *models[group->rank()];
        using tandem::testing::error_message;
        EXPECT_THAT(error_message<ValueError>([&] {
                      DistributedDataParallel ddp(model, {.group = group, .zero_stage = 3});
                    }),
                    ::testing::HasSubstr("stage must be 1 or 2 in DDP, got 3"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      DistributedDataParallel ddp(
                          model, {.group = group, .comm_hook = bf16_compress(), .zero_stage = 1});
                    }),
                    ::testing::HasSubstr("a comm_hook ('bf16_compress') replaces an all-reduce"));
        DistributedDataParallel plain(model, {.group = group});
        EXPECT_THAT(error_message<ValueError>([&] {
                      zero_optimizer<optim::SGD>(plain, model.parameters(), optim::SGDOptions{});
                    }),
                    ::testing::HasSubstr("zero_stage is 0, so nothing is sharded"));
      },
      2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        Mlp& model = *models[group->rank()];
        DistributedDataParallel ddp(model, {.group = group, .zero_stage = 1});
        EXPECT_THAT(tandem::testing::error_message<ValueError>([&] {
                      zero_optimizer<optim::SGD>(ddp, other.parameters(), optim::SGDOptions{});
                    }),
                    ::testing::HasSubstr("is not a parameter of the module DDP wraps"));
      },
      2);
  // Linear(1, 1) has 2 elements: on 4 ranks, ranks 2 and 3 would own only padding. Every rank
  // says so (none is left waiting in a collective).
  nn::Linear tiny0(1, 1), tiny1(1, 1), tiny2(1, 1), tiny3(1, 1);
  nn::Linear* tinies[] = {&tiny0, &tiny1, &tiny2, &tiny3};
  for (int r = 1; r < 4; ++r) tinies[r]->to(Device::cpu(r));
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        nn::Linear& tiny = *tinies[group->rank()];
        EXPECT_THAT(tandem::testing::error_message<ValueError>([&] {
                      DistributedDataParallel ddp(tiny, {.group = group, .zero_stage = 2});
                    }),
                    ::testing::HasSubstr("rank 2 of 4 would own no parameter element"));
      },
      4);
}

}  // namespace
}  // namespace tandem::parallel
