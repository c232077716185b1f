// tests/parallel/gpt_parallel_test.cpp — a GPT trains in every parallel mode as it does on one
// device. The model is a small float64 GPT (2 blocks, 2 heads, biases on, dropout off, so every
// mode sees the same function); the recipe is nanoGPT's: AdamW with decay on matrices only, the
// gradient's global norm clipped (to a value the first step does exceed, so the clip is tested),
// three steps on fixed batches. Each mode must end with the parameters of one device to 1e-10
// absolute + 1e-8 relative (float64: what remains is sums taken in another order):
//   DataParallel over cpu:0, cpu:1 (the tied lm_head replicated with wte);
//   a pipeline over cpu:1, cpu:2, GPipe and 1F1B, whose first and last stages each hold a copy of
//     the tied embedding (tied.h), which must stay equal and count once in the clip;
//   activation checkpointing of every block;
//   DDP over 2 ranks (processes), each on half of every batch.
// Mixed precision cannot match float64; its test states its own tolerance against float32.
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/ddp/distributed_data_parallel.h>
#include <tandem/parallel/ddp/zero_optimizer.h>
#include <tandem/parallel/fsdp/fully_shard.h>
#include <tandem/parallel/pipeline/pipeline.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>

#include "data/temp_dir.h"
#include "parallel/ddp_models.h"

namespace tandem::parallel {
namespace {

using namespace std::chrono_literals;
using tandem::testing::expect_same_params;
using tandem::testing::flat_params;

constexpr int64_t kGptBatch = 4, kT = 8, kVocab = 11;
constexpr int kGptSteps = 3;
constexpr double kClip = 0.05;

nn::GPTConfig tiny_config(DType dtype = kFloat64) {
  return {.block_size = kT,
          .vocab_size = kVocab,
          .n_layer = 2,
          .n_head = 2,
          .n_embd = 8,
          .dropout = 0.0,
          .bias = true,
          .tensor = {.dtype = dtype}};
}

std::shared_ptr<nn::Sequential> tiny_gpt(DType dtype = kFloat64) {
  manual_seed(7);
  return std::make_shared<nn::Sequential>(nn::gpt(tiny_config(dtype)));
}

// Step s's batch: ids and their next-token targets, [kGptBatch, kT] each.
std::pair<Tensor, Tensor> batch(int s) {
  std::vector<int64_t> ids;
  data::SplitMix64 rng(uint64_t(s + 1));
  for (int64_t i = 0; i < kGptBatch * (kT + 1); ++i) ids.push_back(int64_t(rng.next() % kVocab));
  const Tensor tokens = from_vector(ids, {kGptBatch, kT + 1});
  return {tokens.narrow(1, 0, kT).contiguous(), tokens.narrow(1, 1, kT).contiguous()};
}

std::unique_ptr<optim::AdamW> adamw(nn::Module& model) {
  return std::make_unique<optim::AdamW>(optim::adamw_groups(
      model.named_parameters(), {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
}

Tensor loss_fn(const Tensor& logits, const Tensor& y) { return nn::gpt_loss(logits, y); }

// The recipe around a mode: `step(x, y)` runs forward + backward of one batch and returns the
// loss; `clip` clips the gradients and returns the norm before clipping.
template <typename Step, typename Clip>
std::vector<double> train(nn::Module& model, Step&& step, Clip&& clip) {
  auto opt = adamw(model);
  for (int s = 0; s < kGptSteps; ++s) {
    auto [x, y] = batch(s);
    opt->zero_grad();
    step(x, y);
    const double norm = clip();
    if (s == 0) {
      EXPECT_GT(norm, kClip) << "the clip must act for the test to test it";
    }
    opt->step();
  }
  model.to(Device::cpu());
  return flat_params(model);
}

std::vector<double> one_device() {
  auto model = tiny_gpt();
  return train(
      *model, [&](const Tensor& x, const Tensor& y) { loss_fn((*model)(x), y).backward(); },
      [&] { return optim::clip_grad_norm_(model->parameters(), kClip); });
}

TEST(GPTParallel, DataParallelOverTwoDevicesTrainsAsOne) {
  const std::vector<double> reference = one_device();
  auto model = tiny_gpt();
  model->to(Device("cpu:0"));
  DataParallel dp(model, {.device_ids = {Device("cpu:0"), Device("cpu:1")}});
  expect_same_params(train(
                         *model,
                         [&](const Tensor& x, const Tensor& y) {
                           loss_fn(dp(x.to(Device("cpu:0"))), y.to(Device("cpu:0"))).backward();
                         },
                         [&] { return optim::clip_grad_norm_(model->parameters(), kClip); }),
                     reference);
}

std::vector<double> pipelined(PipelineSchedule schedule, int64_t chunks, bool accumulate = false) {
  auto model = tiny_gpt();
  const std::vector<Device> devices = {Device("cpu:1"), Device("cpu:2")};
  Pipeline pipe(split(*model, devices, {2, 3}), {.chunks = chunks, .schedule = schedule});
  // The embedding on the first stage, lm_head on the last: one tensor on one device, two copies.
  Tensor wte = pipe.stages()[0].modules.state_dict()[0].second;
  Tensor head = pipe.stages()[1].modules.state_dict().back().second;
  EXPECT_FALSE(wte.is_same(head));
  EXPECT_EQ(pipe.stages()[0].tied.size(), 1u);
  EXPECT_EQ(pipe.stages()[1].tied.size(), 1u);
  std::vector<double> out = train(
      *model,
      [&](const Tensor& x, const Tensor& y) {
        if (!accumulate) return pipe.step(x, y, loss_fn);
        // Two half batches, gradients accumulating (each loss halved): the tied copies must not
        // count the first half twice.
        const auto half = [&](const Tensor& t, int k) { return t.narrow(0, k * kGptBatch / 2, 2); };
        const auto half_loss = [](const Tensor& o, const Tensor& t) { return loss_fn(o, t) * 0.5; };
        pipe.step(half(x, 0), half(y, 0), half_loss);
        return pipe.step(half(x, 1), half(y, 1), half_loss);
      },
      [&] { return clip_grad_norm_(placements(pipe.stages()), kClip); });
  EXPECT_EQ(wte.to_vector<double>(), head.to_vector<double>()) << "the tied copies parted ways";
  return out;
}

// After a pipelined run the model holds both copies (as parameters): the reference's flat list
// has the tied weight once, so the comparison drops the last stage's copy.
std::vector<double> without_head_copy(std::vector<double> flat) {
  flat.resize(flat.size() - size_t(kVocab * tiny_config().n_embd));
  return flat;
}

TEST(GPTParallel, GPipeOverTwoStagesKeepsTheTiedEmbeddingAndTrainsAsOne) {
  expect_same_params(without_head_copy(pipelined(PipelineSchedule::GPipe, 4)), one_device());
}

TEST(GPTParallel, OneFOneBOverTwoStagesTrainsAsOne) {
  expect_same_params(without_head_copy(pipelined(PipelineSchedule::OneFOneB, 2)), one_device());
}

TEST(GPTParallel, PipelineGradientAccumulationSumsTheTiedCopiesOnce) {
  expect_same_params(without_head_copy(pipelined(PipelineSchedule::GPipe, 2, true)), one_device());
}

TEST(GPTParallel, EveryBlockCheckpointedTrainsAsOne) {
  auto plain = tiny_gpt();
  nn::Sequential model;
  for (const nn::NamedModule& m : plain->items()) {
    const bool block = dynamic_cast<const nn::Block*>(&m.module.get()) != nullptr;
    model.push_back(m.name,
                    block ? nn::AnyModule(nn::Checkpointed(m.module.shared())) : m.module.shared());
  }
  EXPECT_EQ(model.state_dict().size(), plain->state_dict().size());
  expect_same_params(
      train(
          model, [&](const Tensor& x, const Tensor& y) { loss_fn(model(x), y).backward(); },
          [&] { return optim::clip_grad_norm_(model.parameters(), kClip); }),
      one_device());
}

TEST(GPTParallel, DDPOverTwoRanksTrainsAsOne) {
  tandem::testing::TempDir dir;
  const std::string out = dir.file("params.bin");
  spawn(
      [&](int rank) {
        init_process_group({.timeout = 60s});
        auto model = tiny_gpt();
        if (rank == 1) {  // different weights: DDP must copy rank 0's
          NoGradGuard no_grad;
          model->parameters()[0].fill_(0.5);
        }
        DistributedDataParallel<nn::Sequential> ddp(*model, {.bucket_cap_mb = 0.002});
        const auto mine = [&](const Tensor& t) { return t.narrow(0, rank * kGptBatch / 2, 2); };
        const std::vector<double> p = train(
            *model,
            [&](const Tensor& x, const Tensor& y) { loss_fn(ddp(mine(x)), mine(y)).backward(); },
            [&] { return optim::clip_grad_norm_(model->parameters(), kClip); });
        if (rank == 0) tandem::testing::write_doubles(out, p);
        destroy_process_group();
      },
      2);
  expect_same_params(tandem::testing::read_doubles(out), one_device());
}

// ZeRO-2 over two thread ranks (cpu:0, cpu:1): each updates its half of every bucket, the tied
// embedding included, with AdamW's two groups and the clip over both ranks' halves.
TEST(GPTParallel, ZeroStage2OverTwoRanksTrainsAsOne) {
  std::vector<std::shared_ptr<nn::Sequential>> models = {tiny_gpt(), tiny_gpt()};
  for (int r = 0; r < 2; ++r) models[size_t(r)]->to(Device::cpu(r));
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        nn::Sequential& model = *models[size_t(rank)];
        DistributedDataParallel<nn::Sequential> ddp(
            model, {.group = group, .bucket_cap_mb = 0.002, .zero_stage = 2});
        auto opt = zero_optimizer<optim::AdamW>(
            ddp,
            optim::adamw_groups(model.named_parameters(),
                                {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
        const auto mine = [&](const Tensor& t) {
          return t.narrow(0, rank * kGptBatch / 2, 2).to(dev);
        };
        for (int s = 0; s < kGptSteps; ++s) {
          auto [x, y] = batch(s);
          opt->zero_grad();
          loss_fn(ddp(mine(x)), mine(y)).backward();
          clip_grad_norm_(*ddp.placements(), kClip);
          opt->step();
        }
      },
      2);
  models[0]->to(Device::cpu());
  expect_same_params(flat_params(*models[0]), one_device());
}

// fully_shard over two thread ranks: every block, ln_f and the tied embedding (the root's unit,
// its 11 rows cut 6 and 5) sharded; each block's parameters gathered for its forward and again for
// its backward; with every block activation-checkpointed (the recompute reads the gathered
// parameters), and with the forward's parameters kept for backward.
void expect_fully_sharded_trains_as_one(bool checkpointed, bool reshard) {
  constexpr int kWorld = 2;
  std::vector<nn::Sequential> models;
  for (int r = 0; r < kWorld; ++r) {
    nn::Sequential plain = *tiny_gpt();
    nn::Sequential m;
    for (const nn::NamedModule& item : plain.items()) {
      const bool block = dynamic_cast<const nn::Block*>(&item.module.get()) != nullptr;
      m.push_back(item.name, checkpointed && block ? nn::AnyModule(nn::Checkpointed(item.module))
                                                   : item.module);
    }
    m.to(Device::cpu(r));
    models.push_back(std::move(m));
  }
  std::vector<double> result;
  spawn_threads(
      [&](std::shared_ptr<Communicator> group) {
        const int rank = group->rank();
        const Device dev = Device::cpu(rank);
        FullyShardedModule fsdp(std::move(models[size_t(rank)]),
                                {.group = group, .reshard_after_forward = reshard});
        EXPECT_EQ(fsdp.units().size(), 5u) << "embedding, 2 blocks, ln_f, and the tied root";
        auto opt = adamw(fsdp);
        const auto mine = [&](const Tensor& t) {
          return t.narrow(0, rank * kGptBatch / kWorld, kGptBatch / kWorld).to(dev);
        };
        for (int s = 0; s < kGptSteps; ++s) {
          auto [x, y] = batch(s);
          opt->zero_grad();
          loss_fn(fsdp(mine(x)), mine(y)).backward();
          clip_grad_norm_(*fsdp.placements(), kClip);
          opt->step();
        }
        nn::StateDict whole = fsdp.full_state_dict();
        if (rank == 0) {
          auto m = tiny_gpt();
          for (auto& [name, t] : whole) t = t.to(Device::cpu());
          m->load_state_dict(whole);
          result = flat_params(*m);
        }
      },
      kWorld);
  expect_same_params(result, one_device());
}

TEST(GPTParallel, FullyShardOverTwoRanksTrainsAsOne) {
  expect_fully_sharded_trains_as_one(false, true);
}
TEST(GPTParallel, FullyShardWithCheckpointedBlocksTrainsAsOne) {
  expect_fully_sharded_trains_as_one(true, true);
}
TEST(GPTParallel, FullyShardWithoutReshardingTrainsAsOne) {
  expect_fully_sharded_trains_as_one(false, false);
}

// Two thread ranks, AdamW's groups without the clip (whose norm each mode sums in its own order):
// fully_shard reaches DDP's parameters bit for bit, the tied embedding included.
std::vector<double> two_ranks_unclipped(bool sharded) {
  std::vector<nn::Sequential> models;
  for (int r = 0; r < 2; ++r) {
    models.push_back(*tiny_gpt());
    models.back().to(Device::cpu(r));
  }
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
        auto opt = adamw(sharded ? static_cast<nn::Module&>(*fsdp) : model);
        const auto mine = [&](const Tensor& t) { return t.narrow(0, rank * 2, 2).to(dev); };
        for (int s = 0; s < kGptSteps; ++s) {
          auto [x, y] = batch(s);
          opt->zero_grad();
          loss_fn(sharded ? (*fsdp)(mine(x)) : (*ddp)(mine(x)), mine(y)).backward();
          opt->step();
        }
        nn::StateDict whole = sharded ? fsdp->full_state_dict() : model.state_dict();
        if (rank == 0) {
          auto m = tiny_gpt();
          for (auto& [name, t] : whole) t = t.to(Device::cpu());
          m->load_state_dict(whole);
          result = flat_params(*m);
        }
      },
      2);
  return result;
}

TEST(GPTParallel, FullyShardOnTwoRanksReachesDdpBitForBit) {
  EXPECT_EQ(two_ranks_unclipped(true), two_ranks_unclipped(false));
}

// Mixed precision: three steps under autocast (bfloat16; float16 with a GradScaler) from the same
// float32 weights as three float32 steps. The low-precision matmuls round inputs to 8 (bf16) or
// 11 (fp16) significant bits, so the parameters agree only to a stated tolerance: the largest
// difference, over the largest step any parameter took in float32.
double mixed_precision_error(DType amp) {
  const auto run = [](DType dtype) {
    auto model = tiny_gpt(kFloat32);
    const std::vector<double> before = flat_params(*model);
    optim::GradScaler scaler({.enabled = dtype == kFloat16});
    auto opt = adamw(*model);
    for (int s = 0; s < kGptSteps; ++s) {
      auto [x, y] = batch(s);
      opt->zero_grad();
      Tensor loss;
      {
        std::optional<AutocastGuard> autocast;
        if (dtype != kFloat32) autocast.emplace(DeviceType::CPU, dtype);
        loss = loss_fn((*model)(x), y);
      }
      EXPECT_EQ(loss.dtype(), kFloat32) << "autocast keeps the loss in float32";
      scaler.scale(loss).backward();
      scaler.unscale_(*opt);
      optim::clip_grad_norm_(model->parameters(), kClip);
      scaler.step(*opt);
      scaler.update();
    }
    EXPECT_EQ(scaler.skipped_steps(), 0);
    return std::make_pair(before, flat_params(*model));
  };
  const auto [before, reference] = run(kFloat32);
  const auto [same_before, low] = run(amp);
  double largest_step = 0, worst = 0;
  for (size_t i = 0; i < low.size(); ++i) {
    largest_step = std::max(largest_step, std::abs(reference[i] - before[i]));
    worst = std::max(worst, std::abs(low[i] - reference[i]));
  }
  std::printf("autocast %s: worst parameter difference %.3g, %.3g of the largest step\n",
              std::string(name(amp)).c_str(), worst, worst / largest_step);
  return worst / largest_step;
}

TEST(GPTParallel, AutocastBFloat16StaysNearFloat32) {
  // Adam's steps are lr-sized whatever the gradient, so a sign flip of a tiny gradient moves a
  // parameter by a whole step: the bound is a fraction of the largest step, not of each.
  EXPECT_LT(mixed_precision_error(kBFloat16), 0.3);
}

TEST(GPTParallel, AutocastFloat16WithGradScalerStaysNearFloat32) {
  EXPECT_LT(mixed_precision_error(kFloat16), 0.1);
}

}  // namespace
}  // namespace tandem::parallel
