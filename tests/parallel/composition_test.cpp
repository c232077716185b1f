// Modes stacked that used to refuse each other: tensor parallelism under ZeRO-1/2 (DDP's pieces of
// the TP slices), tensor parallelism with activation-checkpointed blocks (alone, with sequence
// parallelism under fully_shard), and a pipeline of checkpointed blocks over tensor-parallel
// slices. Each trains a 2-layer GPT (a vocabulary of 37, padded to 40 rows) for 3 AdamW steps
// with clipping that bites, in float64 on thread ranks, to one device's parameters and AdamW
// state (≤ 1e-10 relative, each tensor), the norm read from the one placement table.
#include <gtest/gtest.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/whole_state.h>
#include <tandem/tandem.h>

#include <cmath>
#include <map>

#include "parallel/drawn_gpt.h"
#include "parallel/token_batch.h"

namespace tandem::parallel::composition_test {  // named: unity builds join test files
namespace {

constexpr int64_t kBatch = 4, kT = tandem::testing::kDrawnT, kVocab = tandem::testing::kDrawnVocab;
constexpr int kSteps = 3;
constexpr double kClip = 0.3, kTolerance = 1e-10;

// The model (drawn_gpt.h); with `checkpointed`, each block wrapped in nn::Checkpointed (the same
// weights), as `tandem train --activation-checkpointing` wraps them.
nn::Sequential whole_gpt(bool checkpointed = false, double dropout = 0) {
  nn::Sequential copy = tandem::testing::drawn_gpt(23, dropout);
  return checkpointed ? tandem::testing::with_checkpointed_blocks(copy) : copy;
}

std::pair<Tensor, Tensor> batch(int step) {
  return tandem::testing::random_token_batch(kBatch, kT, kVocab, uint64_t(step + 40));
}

Tensor rows_of(const Tensor& t, int k, int n, Device dev) {
  return t.narrow(0, k * kBatch / n, kBatch / n).to(dev);
}

optim::AdamW adamw(const nn::StateDict& named) {
  return optim::AdamW(optim::adamw_groups(named, {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}));
}

struct Trained {
  nn::StateDict params;
  optim::OptimizerState state;
};

// One device: the parameters and AdamW's state after kSteps clipped steps.
Trained one_device() {
  nn::Sequential model = whole_gpt();
  optim::AdamW opt = adamw(model.named_parameters());
  for (int s = 0; s < kSteps; ++s) {
    const auto [x, y] = batch(s);
    opt.zero_grad();
    nn::gpt_loss(model(x), y).backward();
    EXPECT_GT(optim::clip_grad_norm_(model.parameters(), kClip), kClip) << "the clip must bite";
    opt.step();
  }
  return {model.named_parameters(), opt.state_dict()};
}

double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = std::sqrt(sum(b * b).item());
  return std::sqrt(sum((a - b) * (a - b)).item()) / (scale > 0 ? scale : 1);
}

// Every tensor of `got` (whole, under one device's names; optimizer state optional) is one
// device's.
void expect_one_device(const Trained& got, const std::string& what) {
  const Trained want = one_device();
  std::map<std::string, Tensor> by_name(got.params.begin(), got.params.end());
  for (const auto& [name, p] : want.params) {
    ASSERT_TRUE(by_name.count(name)) << what << ": no " << name;
    EXPECT_LE(relative_error(by_name.at(name).to(Device::cpu()), p), kTolerance)
        << what << ": " << name;
  }
  if (got.state.tensors.empty()) return;
  ASSERT_EQ(got.state.tensors.size(), want.state.tensors.size()) << what;
  for (size_t i = 0; i < want.state.tensors.size(); ++i)
    if (want.state.tensors[i].second.dim() > 0) {
      EXPECT_LE(relative_error(got.state.tensors[i].second, want.state.tensors[i].second),
                kTolerance)
          << what << ": " << want.state.tensors[i].first;
    }
}

// (dp, tp) = (2, 2): DDP with ZeRO stage 1 or 2 over "dp" shards the optimizer state (and the
// gradients) of each rank's tensor-parallel slices; the whole state (parallel/whole_state.h) is
// put together from ZeRO's pieces of the slices.
TEST(ComposedModes, ZeroTimesTensorParallelTrainsAsOneDevice) {
  for (int stage : {1, 2}) {
    Trained got;
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
          const auto tp = mesh.group("tp");
          const Device dev = Device::cpu(world->rank());
          nn::Sequential whole = whole_gpt();
          auto table = std::make_shared<PlacementTable>();
          nn::Sequential model = tp::tensor_parallel_gpt(whole, tp, {.placements = table});
          move_to(model, dev, *table);
          DistributedDataParallel ddp(model, {.group = mesh.group("dp"),
                                              .bucket_cap_mb = 0.01,
                                              .zero_stage = stage,
                                              .placements = table});
          auto opt = zero_optimizer<optim::AdamW>(
              ddp, optim::adamw_groups(model.named_parameters(),
                                       {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}));
          const int dp = mesh.coordinate("dp");
          for (int s = 0; s < kSteps; ++s) {
            const auto [x, y] = batch(s);
            opt->zero_grad();
            tp::gpt_loss(ddp(rows_of(x, dp, 2, dev)), rows_of(y, dp, 2, dev), tp).backward();
            clip_grad_norm_(*table, kClip);
            opt->step();
          }
          nn::StateDict params = full_state_dict(*table, model, world.get());
          optim::OptimizerState state =
              full_optimizer_state(*table, model, opt->inner(), world.get());
          if (world->rank() == 0) got = {std::move(params), std::move(state)};
        },
        4);
    expect_one_device(got, "ZeRO-" + std::to_string(stage) + " x TP");
  }
}

// Checkpointed blocks cut by the plan: tp = 2 alone, and (dp, tp) = (2, 2) with sequence
// parallelism under fully_shard (the recompute gathers the shards and runs the block's
// collectives again, in backward).
TEST(ComposedModes, TensorParallelCheckpointedBlocksTrainAsOneDevice) {
  for (bool mesh_of_four : {false, true}) {
    const int world_size = mesh_of_four ? 4 : 2;
    Trained got;
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          DeviceMesh mesh(world, {world_size / 2, 2}, {"dp", "tp"});
          const auto tp = mesh.group("tp");
          const Device dev = Device::cpu(world->rank());
          nn::Sequential whole = whole_gpt(/*checkpointed=*/true);
          auto table = std::make_shared<PlacementTable>();
          auto model = std::make_shared<nn::Sequential>(tp::tensor_parallel_gpt(
              whole, tp, {.sequence_parallel = mesh_of_four, .placements = table}));
          EXPECT_NO_THROW(model->at<nn::Checkpointed>("transformer.h.0"));  // still checkpointed
          move_to(*model, dev, *table);
          std::unique_ptr<FullyShardedModule> fsdp;
          if (mesh_of_four)
            fsdp = std::make_unique<FullyShardedModule>(
                model, FullyShardOptions{.group = mesh.group("dp"), .placements = table});
          optim::AdamW opt = adamw(model->named_parameters());
          const int dp = mesh.coordinate("dp"), n = world_size / 2;
          for (int s = 0; s < kSteps; ++s) {
            const auto [x, y] = batch(s);
            opt.zero_grad();
            const Tensor xs = rows_of(x, dp, n, dev), ys = rows_of(y, dp, n, dev);
            tp::gpt_loss(fsdp ? (*fsdp)(xs) : (*model)(xs), ys, tp).backward();
            reduce_partial_gradients(*table);
            clip_grad_norm_(*table, kClip);
            opt.step();
          }
          nn::StateDict params = full_state_dict(*table, *model, world.get());
          if (world->rank() == 0) got.params = std::move(params);
        },
        world_size);
    expect_one_device(got, mesh_of_four ? "TP + SP + checkpointed under FSDP" : "TP checkpointed");
  }
}

// The plan and the wrappers given no table between them (each keeps its own): fully_shard's and
// DDP's tables adopt the plan's cuts (placement.h's registry), so the norm read from the
// wrapper's table still sums over "tp" and the run trains as one device, with sequence
// parallelism's partial gradients reduced from the same table.
TEST(ComposedModes, WrappersAdoptTensorParallelCutsWithoutASharedTable) {
  for (bool fully_sharded : {false, true}) {
    Trained got;
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          DeviceMesh mesh(world, {2, 2}, {"dp", "tp"});
          const auto tp = mesh.group("tp");
          const Device dev = Device::cpu(world->rank());
          nn::Sequential whole = whole_gpt();
          whole.to(dev);  // cut on the device: the slices the wrappers meet are the plan's
          auto model = std::make_shared<nn::Sequential>(
              tp::tensor_parallel_gpt(whole, tp, {.sequence_parallel = true}));
          std::unique_ptr<FullyShardedModule> fsdp;
          std::unique_ptr<DistributedDataParallel<nn::Sequential>> ddp;
          if (fully_sharded)
            fsdp = std::make_unique<FullyShardedModule>(
                model, FullyShardOptions{.group = mesh.group("dp")});
          else
            ddp = std::make_unique<DistributedDataParallel<nn::Sequential>>(
                *model, DDPOptions{.group = mesh.group("dp")});
          PlacementTable& table = fsdp ? *fsdp->placements() : *ddp->placements();
          EXPECT_TRUE(table.divides("tp")) << table.str();
          optim::AdamW opt = adamw(model->named_parameters());
          const int dp = mesh.coordinate("dp");
          for (int s = 0; s < kSteps; ++s) {
            const auto [x, y] = batch(s);
            opt.zero_grad();
            const Tensor xs = rows_of(x, dp, 2, dev), ys = rows_of(y, dp, 2, dev);
            tp::gpt_loss(fsdp ? (*fsdp)(xs) : (*ddp)(xs), ys, tp).backward();
            reduce_partial_gradients(table);
            clip_grad_norm_(table, kClip);
            opt.step();
          }
          nn::StateDict params = full_state_dict(table, *model, world.get());
          if (world->rank() == 0) got.params = std::move(params);
        },
        4);
    expect_one_device(
        got, fully_sharded ? "TP + SP, fully_shard's own table" : "TP + SP, DDP's own table");
  }
}

// With dropout, the masks inside a tensor-parallel block come from each rank's own stream
// (attention's, and with sequence parallelism every dropout's): a checkpointed block's recompute
// replays them, so tp = 2 trains to the same bits with and without checkpointing.
TEST(ComposedModes, CheckpointedTensorParallelBlocksReplayEachRanksDropout) {
  for (bool sp : {false, true}) {
    std::vector<nn::StateDict> got(2);
    for (bool checkpointed : {false, true}) {
      // Drawn before the ranks start: manual_seed reseeds every device, the ranks' too.
      nn::Sequential whole = whole_gpt(checkpointed, 0.2);
      spawn_threads(
          [&](std::shared_ptr<Communicator> g) {
            const Device dev = Device::cpu(g->rank());
            auto table = std::make_shared<PlacementTable>();
            nn::Sequential model =
                tp::tensor_parallel_gpt(whole, g, {.sequence_parallel = sp, .placements = table});
            move_to(model, dev, *table);
            optim::AdamW opt = adamw(model.named_parameters());
            g->barrier()->wait();  // every rank's stream seeded from the drawing's seed first
            default_generator(dev).manual_seed(5);  // the masks every rank draws alike
            for (int s = 0; s < kSteps; ++s) {
              const auto [x, y] = batch(s);
              opt.zero_grad();
              tp::gpt_loss(model(x.to(dev)), y.to(dev), g).backward();
              reduce_partial_gradients(*table);
              clip_grad_norm_(*table, kClip);
              opt.step();
            }
            nn::StateDict params = full_state_dict(*table, model, g.get());
            if (g->rank() == 0) got[checkpointed] = std::move(params);
          },
          2);
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    for (size_t i = 0; i < got[0].size(); ++i)
      EXPECT_EQ(got[1][i].second.to_vector<double>(), got[0][i].second.to_vector<double>())
          << (sp ? "with sequence parallelism: " : "") << got[0][i].first;
  }
}

// (pp, tp) = (2, 2), 1F1B over 2 micro-batches, each stage's blocks checkpointed: the pipeline
// keeps the Checkpointed items, and the table counts the tied copy once.
TEST(ComposedModes, PipelineOfCheckpointedTensorParallelBlocksTrainsAsOneDevice) {
  Trained got;
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        DeviceMesh mesh(world, {2, 2}, {"pp", "tp"});
        const auto tp = mesh.group("tp");
        const Device dev = Device::cpu(world->rank());
        nn::Sequential whole = whole_gpt(/*checkpointed=*/true);
        auto table = std::make_shared<PlacementTable>();
        nn::Sequential model = tp::tensor_parallel_gpt(whole, tp, {.placements = table});
        DistributedPipeline pipe(
            model, mesh.group("pp"),
            {.chunks = 2, .schedule = PipelineSchedule::OneFOneB, .placements = table});
        move_to(pipe.stage(), dev, *table);
        optim::AdamW opt = adamw(pipe.stage().named_parameters());
        for (int s = 0; s < kSteps; ++s) {
          const auto [x, y] = batch(s);
          opt.zero_grad();
          pipe.step(x.to(dev), y.to(dev),
                    [&](const Tensor& out, const Tensor& t) { return tp::gpt_loss(out, t, tp); });
          clip_grad_norm_(*table, kClip);
          opt.step();
        }
        const nn::StateDict whole_state = full_state_dict(*table, pipe.stage(), world.get());
        if (world->rank() == 0) got.params = whole_state;
      },
      4);
  expect_one_device(got, "PP x TP, checkpointed");
}

// (dp, pp) = (2, 2), 1F1B over 2 micro-batches, DDP with ZeRO stage 1 or 2 over each stage: the
// micro-batches run inside no_sync(), then one reduction (reduce_gradients) averages the
// stage's gradients over dp (stage 2: into this rank's pieces), and the stage's optimizer
// steps its pieces. The whole AdamW state is put together from every stage's pieces.
TEST(ComposedModes, ZeroOverPipelineStagesTrainsAsOneDevice) {
  for (int stage : {1, 2}) {
    Trained got;
    spawn_threads(
        [&](std::shared_ptr<Communicator> world) {
          DeviceMesh mesh(world, {2, 2}, {"dp", "pp"});
          const Device dev = Device::cpu(world->rank());
          nn::Sequential whole = whole_gpt();
          auto table = std::make_shared<PlacementTable>();
          DistributedPipeline pipe(
              whole, mesh.group("pp"),
              {.chunks = 2, .schedule = PipelineSchedule::OneFOneB, .placements = table});
          move_to(pipe.stage(), dev, *table);
          DistributedDataParallel ddp(pipe.stage(), {.group = mesh.group("dp"),
                                                     .bucket_cap_mb = 0.01,
                                                     .zero_stage = stage,
                                                     .placements = table});
          auto opt = zero_optimizer<optim::AdamW>(
              ddp, optim::adamw_groups(pipe.stage().named_parameters(),
                                       {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1},
                                       /*keep_empty_groups=*/true));
          const int dp = mesh.coordinate("dp");
          for (int s = 0; s < kSteps; ++s) {
            const auto [x, y] = batch(s);
            opt->zero_grad();
            {
              const auto quiet = ddp.no_sync();
              pipe.step(rows_of(x, dp, 2, dev), rows_of(y, dp, 2, dev),
                        [](const Tensor& out, const Tensor& t) { return nn::gpt_loss(out, t); });
            }
            ddp.reduce_gradients();
            clip_grad_norm_(*table, kClip);
            opt->step();
          }
          nn::StateDict params = full_state_dict(*table, pipe.stage(), world.get());
          optim::OptimizerState state =
              full_optimizer_state(*table, pipe.stage(), opt->inner(), world.get());
          if (world->rank() == 0) got = {std::move(params), std::move(state)};
        },
        4);
    expect_one_device(got, "ZeRO-" + std::to_string(stage) + " over PP stages");
  }
}

}  // namespace
}  // namespace tandem::parallel::composition_test
