// tests/parallel/fsdp_accounting_test.cpp — what fully_shard keeps on each device and sends,
// measured against the formulas and against DDP; bit-for-bit agreement with DDP on 2 ranks; whole
// state dicts loaded on another number of ranks; the process backends; misuse. Ranks are threads
// on cpu:0..N-1 (each device's memory counted on its own) unless a test says otherwise.
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::flat_params;

constexpr int64_t kAccountingBatch = 8;  // per rank

// 784-64-32-12: every row count divides by 2 and 4, so no rank holds padding.
nn::Sequential mlp() {
  return nn::Sequential{{"flatten", nn::Flatten()}, {"fc1", nn::Linear(784, 64)},
                        {"relu1", nn::ReLU()},      {"fc2", nn::Linear(64, 32)},
                        {"relu2", nn::ReLU()},      {"fc3", nn::Linear(32, 12)}};
}

std::vector<nn::Sequential> mlps(int world, DType dtype) {
  return tandem::testing::sequentials_on_devices(world, dtype, mlp);
}

Tensor loss_on(const Tensor& logits, Device dev) {
  return cross_entropy(logits, zeros({logits.size(0)}, {.dtype = kInt64, .device = dev}));
}

// After a step with Adam each rank holds its shards (Ψ/N), their gradients (Ψ/N) and Adam's two
// moments (2Ψ/N): 16Ψ/N bytes in float32, 32Ψ/N here in float64, and nothing of the whole
// parameters, which the model gave up when it was wrapped.
TEST(FullyShard, EachRankKeepsWhatTheFormulaSays) {
  constexpr int kWorld = 4;
  const double psi = double(flat_params(*std::make_unique<nn::Sequential>(mlp())).size());
  auto models = mlps(kWorld, kFloat64);
  std::vector<double> kept(kWorld), whole(kWorld);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        whole[size_t(rank)] = double(memory_stats(dev).allocated_bytes);
        FullyShardedModule fsdp(std::move(models[size_t(rank)]), {.group = group});
        optim::Adam opt(fsdp.parameters());
        loss_on(fsdp(randn({kAccountingBatch, 784}, {.dtype = kFloat64, .device = dev})), dev)
            .backward();
        opt.step();
        group->barrier()->wait();  // the collectives' meetings hold tensors until all leave
        kept[size_t(rank)] = double(memory_stats(dev).allocated_bytes);
      },
      kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_EQ(whole[size_t(rank)], 8 * psi) << "rank " << rank << " before wrapping";
    EXPECT_EQ(kept[size_t(rank)], 32 * psi / kWorld) << "rank " << rank << " (Ψ = " << psi << ")";
  }
}

// Bytes per step, counted by the communicator (nccl-tests' rule): DDP all-reduces Ψ (2(N-1)/N Ψ
// on the wire); fully_shard all-gathers Ψ in forward, again in backward, and reduce-scatters Ψ
// ((N-1)/N Ψ each): 1.5× DDP, and 1× when the forward's whole parameters are kept for backward.
TEST(FullyShard, EachRankSendsOneAndAHalfTimesDdpOrOnceWithoutResharding) {
  constexpr int kWorld = 4;
  std::map<int, uint64_t> bytes;  // 0: DDP, 1: fully_shard, 2: without resharding
  for (int mode : {0, 1, 2}) {
    auto models = mlps(kWorld, kFloat32);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          const Tensor x = randn({kAccountingBatch, 784}, {.device = dev});
          uint64_t before = 0;
          if (mode == 0) {
            nn::Sequential& model = models[size_t(rank)];
            DistributedDataParallel<nn::Sequential> ddp(model, {.group = group});
            before = group->stats().total_bytes();
            loss_on(ddp(x), dev).backward();
          } else {
            FullyShardedModule fsdp(std::move(models[size_t(rank)]),
                                    {.group = group, .reshard_after_forward = mode == 1});
            before = group->stats().total_bytes();
            loss_on(fsdp(x), dev).backward();
          }
          if (rank == 0) bytes[mode] = group->stats().total_bytes() - before;
        },
        kWorld);
  }
  EXPECT_GT(bytes[0], 0u);
  EXPECT_EQ(double(bytes[1]), 1.5 * double(bytes[0]));
  EXPECT_EQ(bytes[2], bytes[0]);
}

nn::Sequential cnn() {  // two convolutions, ReLU between, a classifier: 3 units
  return nn::Sequential{{"conv1", nn::Conv2d(1, 8, 3)}, {"relu1", nn::ReLU()},
                        {"conv2", nn::Conv2d(8, 6, 3)}, {"relu2", nn::ReLU()},
                        {"flatten", nn::Flatten()},     {"fc", nn::Linear(6 * 24 * 24, 12)}};
}

// Rank 0's parameters after three Adam steps on 2 ranks under DDP (`sharded` false) or
// fully_shard, as one flat list of a model made by `make`.
std::vector<double> two_ranks(nn::Sequential (*make)(), bool sharded) {
  auto models = tandem::testing::sequentials_on_devices(2, kFloat64, make);
  std::vector<double> result;
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        nn::Sequential& model = models[size_t(rank)];
        std::unique_ptr<FullyShardedModule> fsdp;
        std::unique_ptr<DistributedDataParallel<nn::Sequential>> ddp;
        if (sharded)
          fsdp = fully_shard(std::move(model), {.group = group});
        else
          ddp = std::make_unique<DistributedDataParallel<nn::Sequential>>(
              model, DDPOptions{.group = group});
        optim::Adam opt(sharded ? fsdp->parameters() : model.parameters(), {.lr = 1e-2});
        for (int s = 0; s < 3; ++s) {
          opt.zero_grad();
          const Tensor x = full({kAccountingBatch, 1, 28, 28}, 0.01 * (s + 1) * (rank + 1),
                                {.dtype = kFloat64, .device = dev});
          loss_on(sharded ? (*fsdp)(x) : (*ddp)(x), dev).backward();
          opt.step();
        }
        nn::StateDict params = sharded ? fsdp->full_state_dict() : model.state_dict();
        if (rank == 0) {
          nn::Sequential whole = make();
          whole.to(kFloat64);
          for (auto& [name, t] : params) t = t.to(Device::cpu());
          whole.load_state_dict(params);
          result = flat_params(whole);
        }
      },
      2);
  return result;
}

// Three Adam steps on 2 ranks: a reduce-scatter adds the two ranks' gradients as the all-reduce
// does, and Adam does the same arithmetic on a shard as on the whole. (The GPT's is in
// gpt_parallel_test.cpp.)
TEST(FullyShard, TwoRanksReachDdpsParametersBitForBit) {
  EXPECT_EQ(two_ranks(mlp, true), two_ranks(mlp, false)) << "the MLP";
  EXPECT_EQ(two_ranks(cnn, true), two_ranks(cnn, false)) << "the CNN";
}

// Two Adam steps on 3 ranks, whole state dicts of the model and the optimizer, then the third
// step on 2 ranks from them: the parameters of three steps on one device. (fc3's 12 rows and its
// bias cut 4, 4, 4 on 3 ranks and 6, 6 on 2; the moments are resharded as the parameters.)
TEST(FullyShard, WholeStateDictsResumeOnAnotherWorldSize) {
  constexpr int64_t kGlobal = 12;
  const auto data = tandem::testing::synthetic_data(3 * kGlobal);
  const Tensor x = data.first.to(kFloat64), y = data.second;
  manual_seed(0);
  nn::Sequential reference = mlp();
  reference.to(kFloat64);
  const nn::StateDict initial = nn::clone(reference).state_dict();
  optim::Adam ref_opt(reference.parameters(), {.lr = 1e-2});
  optim::OptimizerState ref_after_two;
  for (int s = 0; s < 3; ++s) {
    if (s == 2) {
      ref_after_two = ref_opt.state_dict();  // handles to the live state: copy them
      for (auto& [key, t] : ref_after_two.tensors) t = t.clone();
    }
    ref_opt.zero_grad();
    cross_entropy(reference(x.narrow(0, s * kGlobal, kGlobal)), y.narrow(0, s * kGlobal, kGlobal))
        .backward();
    ref_opt.step();
  }
  nn::StateDict saved;
  optim::OptimizerState saved_opt;
  auto run = [&](int world, int first, int steps, const nn::StateDict& from,
                 const optim::OptimizerState* from_opt) {
    auto models = mlps(world, kFloat64);
    spawn_threads(
        [&](std::shared_ptr<Communicator> group) {
          const int rank = group->rank();
          const Device dev = Device::cpu(rank);
          FullyShardedModule fsdp(std::move(models[size_t(rank)]), {.group = group});
          fsdp.load_full_state_dict(from);
          optim::Adam opt(fsdp.parameters(), {.lr = 1e-2});
          if (from_opt) fsdp.load_full_optimizer_state_dict(opt, *from_opt);
          const int64_t per = kGlobal / world;
          for (int s = first; s < first + steps; ++s) {
            opt.zero_grad();
            const int64_t at = s * kGlobal + rank * per;
            cross_entropy(fsdp(x.narrow(0, at, per).to(dev)), y.narrow(0, at, per).to(dev))
                .backward();
            opt.step();
          }
          nn::StateDict whole = fsdp.full_state_dict();
          optim::OptimizerState whole_opt = fsdp.full_optimizer_state_dict(opt);
          if (rank == 0) {
            for (auto& [name, t] : whole) t = t.to(Device::cpu());
            for (auto& [name, t] : whole_opt.tensors) t = t.to(Device::cpu());
            saved = whole;
            saved_opt = whole_opt;
          }
        },
        world);
  };
  run(3, 0, 2, initial, nullptr);
  // The whole optimizer state is one device's after two steps.
  ASSERT_EQ(saved_opt.tensors.size(), ref_after_two.tensors.size());
  for (size_t k = 0; k < saved_opt.tensors.size(); ++k) {
    EXPECT_EQ(saved_opt.tensors[k].first, ref_after_two.tensors[k].first);
    EXPECT_TRUE(tandem::testing::all_close(saved_opt.tensors[k].second,
                                           ref_after_two.tensors[k].second, 1e-12, 1e-9))
        << saved_opt.tensors[k].first;
  }
  const nn::StateDict after_two = saved;
  const optim::OptimizerState opt_after_two = saved_opt;
  run(2, 2, 1, after_two, &opt_after_two);
  nn::Sequential resumed = mlp();
  resumed.to(kFloat64);
  resumed.load_state_dict(saved);
  tandem::testing::expect_same_params(flat_params(resumed), flat_params(reference));
}

// The same over processes, through each CPU backend's all-gather and reduce-scatter (a backend
// that summed where a mean is asked for would double every step: PyTorch once shipped FSDP so).
// Over shared memory, in place: on 3 ranks rows that do not divide are padded.
class FullyShardOverProcesses : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(FullyShardOverProcesses, TrainsAsOneDevice) {
  // Not a structured binding: clang 14 (the sanitizer builds) cannot capture one in a lambda.
  const std::string backend = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const int64_t n = world * kAccountingBatch;  // the global batch
  const auto data = tandem::testing::synthetic_data(2 * n);
  const Tensor x = data.first.to(kFloat64), y = data.second;
  manual_seed(0);
  nn::Sequential reference = mlp();
  reference.to(kFloat64);
  optim::Adam ref_opt(reference.parameters(), {.lr = 1e-2});
  for (int s = 0; s < 2; ++s) {
    ref_opt.zero_grad();
    cross_entropy(reference(x.narrow(0, s * n, n)), y.narrow(0, s * n, n)).backward();
    ref_opt.step();
  }
  tandem::testing::TempDir dir;
  const std::string out = dir.file("params.bin");
  spawn(
      [&](int rank) {
        init_process_group({.backend = backend, .timeout = 60s});
        manual_seed(rank == 0 ? 0 : 5);
        nn::Sequential model = mlp();
        model.to(kFloat64);
        FullyShardedModule fsdp(std::move(model));
        optim::Adam opt(fsdp.parameters(), {.lr = 1e-2});
        for (int s = 0; s < 2; ++s) {
          opt.zero_grad();
          const int64_t at = s * n + rank * kAccountingBatch;
          cross_entropy(fsdp(x.narrow(0, at, kAccountingBatch)), y.narrow(0, at, kAccountingBatch))
              .backward();
          opt.step();
        }
        nn::StateDict whole = fsdp.full_state_dict();
        if (rank == 0) {
          nn::Sequential m = mlp();
          m.to(kFloat64);
          m.load_state_dict(whole);
          tandem::testing::write_doubles(out, flat_params(m));
        }
        destroy_process_group();
      },
      world);
  tandem::testing::expect_same_params(tandem::testing::read_doubles(out), flat_params(reference));
}

INSTANTIATE_TEST_SUITE_P(Backends, FullyShardOverProcesses,
                         ::testing::Combine(::testing::Values("shm", "gloo"),
                                            ::testing::Values(2, 3)));

TEST(FullyShard, AStateDictThatDoesNotFitIsOneErrorNamingEveryProblem) {
  auto models = mlps(2, kFloat32);
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        FullyShardedModule fsdp(std::move(models[size_t(group->rank())]), {.group = group});
        nn::StateDict sd = fsdp.full_state_dict();
        sd.erase(sd.begin());                       // fc1.weight missing
        sd[0].second = zeros({3});                  // fc1.bias misshapen
        sd.emplace_back("fc9.weight", zeros({1}));  // unexpected
        const std::string msg = tandem::testing::error_message<DataError>(
            [&] { fsdp.load_full_state_dict(sd, "ckpt.safetensors"); });
        for (const char* part : {"ckpt.safetensors", "missing: fc1.weight",
                                 "fc1.bias: [3] given, [64] expected", "unexpected: fc9.weight"})
          EXPECT_THAT(msg, ::testing::HasSubstr(part));
      },
      2);
}

TEST(FullyShard, AModelWithoutParametersIsAnError) {
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const std::string msg = tandem::testing::error_message<ValueError>(
            [&] { FullyShardedModule(nn::Sequential(nn::ReLU()), {.group = group}); });
        EXPECT_THAT(msg, ::testing::HasSubstr("fully_shard: the model has no parameters"));
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel
