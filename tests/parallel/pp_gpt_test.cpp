// tests/parallel/pp_gpt_test.cpp — the GPT cut into pipeline stages that are ranks of their own
// (DistributedPipeline), alone and composed with tensor and data parallelism, trains as on one
// device: a float64 GPT (6 blocks, 4 heads, biases, lm_head tied to the token embedding, which
// the first and last stages each hold a copy of; dropout off) trained 3 AdamW steps with decay on
// matrices and the global norm clipped, on thread ranks (cpu:0..n-1) arranged as a (dp, pp, tp)
// mesh, has one device's loss at every step and one device's parameters, each stage's slices put
// back together, to 1e-12 relative (‖difference‖ / ‖parameter‖). Every schedule (GPipe, 1F1B,
// interleaved with v = 2, ZB-H1, ZB-V, DualPipeV) on PP = 2 and 4 with 4 to 16 micro-batches
// (a covering subset under a sanitizer); PP × TP = 2 × 2 with and without sequence parallelism;
// DP × PP × TP = 2 × 2 × 2, and with ZB-V.
#include <tandem/parallel/all_reduce_gradients.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/comm/thread_communicator.h>
#include <tandem/parallel/device_mesh.h>
#include <tandem/parallel/pipeline/distributed_pipeline.h>
#include <tandem/parallel/tp/gpt.h>
#include <tandem/parallel/whole_state.h>

#include "parallel/token_batch.h"
#include "support/expect.h"
#include "support/sanitizer.h"

namespace tandem::parallel {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 16, kT = 8, kVocab = 12;
constexpr int kSteps = 3;
constexpr double kClip = 0.5;

nn::Sequential initial_gpt() {
  manual_seed(11);
  return nn::gpt({.block_size = kT,
                  .vocab_size = kVocab,
                  .n_layer = 6,  // 9 modules: enough for ZB-V's 8 stages over 4 ranks
                  .n_head = 4,
                  .n_embd = 16,
                  .dropout = 0.0,
                  .bias = true,
                  .tensor = {.dtype = kFloat64}});
}

// Step s's batch: ids and their next tokens, [kBatch, kT] each.
std::pair<Tensor, Tensor> batch(int s) {
  return tandem::testing::random_token_batch(kBatch, kT, kVocab, uint64_t(s + 17));
}

optim::AdamW adamw(const nn::StateDict& named) {
  return optim::AdamW(
      optim::adamw_groups(named, {.lr = 1e-2, .beta2 = 0.99, .weight_decay = 0.1}, true));
}

// One device's whole state: what a checkpoint holds.
struct Checkpoint {
  nn::StateDict model;
  optim::OptimizerState optimizer;
};

struct Trained {
  std::vector<double> losses;
  std::map<std::string, Tensor> params;  // whole tensors, by name
  Checkpoint checkpoint;                 // after the last step
};

// Steps [0, steps) on one device.
Trained one_device(int steps = kSteps) {
  nn::Sequential model = initial_gpt();
  optim::AdamW opt = adamw(model.named_parameters());
  Trained run;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = batch(s);
    opt.zero_grad();
    const Tensor loss = nn::gpt_loss(model(x), y);
    loss.backward();
    const double norm = optim::clip_grad_norm_(model.parameters(), kClip);
    if (s == 0) {
      EXPECT_GT(norm, kClip) << "the clip must act for the test to test it";
    }
    opt.step();
    run.losses.push_back(loss.item());
  }
  for (const auto& [name, p] : model.state_dict()) run.params[name] = p;  // both tied names
  run.checkpoint = {model.state_dict(), opt.state_dict()};
  return run;
}

struct Layout {
  int dp = 1, pp = 2, tp = 1;
  int64_t chunks = 2;
  PipelineSchedule schedule = PipelineSchedule::GPipe;
  bool sequence_parallel = false;
  int64_t virtual_stages = 0;  // interleaved's v (0: 2)
};

// Every rank of a (dp, pp, tp) mesh trains its stage's slices on its rows of batches [from, to),
// after loading `resume` if given; the whole state at the end comes from rank 0.
Trained pipelined(const Layout& l, int from = 0, int to = kSteps,
                  const Checkpoint* resume = nullptr) {
  const int world = l.dp * l.pp * l.tp;
  nn::Sequential whole = initial_gpt();
  std::vector<Trained> runs(static_cast<size_t>(world));
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        DeviceMesh mesh(g, {l.dp, l.pp, l.tp}, {"dp", "pp", "tp"});
        const auto tp = mesh.group("tp"), pp = mesh.group("pp"), dp = mesh.group("dp");
        const Device dev = Device::cpu(g->rank());
        auto table = std::make_shared<PlacementTable>();
        nn::Sequential model = tp::tensor_parallel_gpt(
            whole, tp, {.sequence_parallel = l.sequence_parallel, .placements = table});
        DistributedPipeline pipe(model, pp,
                                 {.chunks = l.chunks,
                                  .schedule = l.schedule,
                                  .virtual_stages = l.virtual_stages,
                                  .placements = table});
        table->add_dimension("dp", dp);  // replicas: the gradients averaged over it below
        move_to(pipe.stage(), dev, *table);
        optim::AdamW opt = adamw(pipe.stage().named_parameters());
        if (resume) {
          load_full_state_dict(*table, pipe.stage(), resume->model, g.get());
          load_full_optimizer_state(*table, pipe.stage(), opt, resume->optimizer, g.get());
        }
        Trained& run = runs[size_t(g->rank())];
        const int64_t rows = kBatch / l.dp, first = mesh.coordinate("dp") * rows;
        for (int s = from; s < to; ++s) {
          const auto [x, y] = batch(s);
          opt.zero_grad();
          const DistributedPipelineResult r = pipe.step(
              x.narrow(0, first, rows).to(dev), y.narrow(0, first, rows).to(dev),
              [&](const Tensor& out, const Tensor& t) { return tp::gpt_loss(out, t, tp); });
          reduce_partial_gradients(*table);
          all_reduce_gradients(pipe.stage().parameters(), *dp, ReduceOp::Mean);
          NoGradGuard no_grad;
          clip_grad_norm_(*table, kClip);
          opt.step();
          Tensor loss = r.loss.reshape({1}).contiguous();
          dp->all_reduce(loss, ReduceOp::Mean)->wait();
          run.losses.push_back(loss.item());
        }
        // The whole state, on rank 0 (parallel/whole_state.h).
        run.checkpoint = {full_state_dict(*table, pipe.stage(), g.get()),
                          full_optimizer_state(*table, pipe.stage(), opt, g.get())};
        for (const auto& [name, p] : run.checkpoint.model) run.params[name] = p;
      },
      world);
  Trained merged = runs[0];
  for (const Trained& r : runs) {
    EXPECT_EQ(r.losses, runs[0].losses) << "every rank reports the same loss";
    for (const auto& [name, p] : r.params) merged.params[name] = p;
  }
  return merged;
}

double relative_error(const Tensor& a, const Tensor& b) {
  return std::sqrt(sum((a - b) * (a - b)).item() / sum(b * b).item());
}

void expect_one_device(const Layout& l) {
  static const Trained want = one_device();
  const Trained got = pipelined(l);
  const std::string what =
      str("DP × PP × TP = ", l.dp, " × ", l.pp, " × ", l.tp, ", ", to_string(l.schedule),
          l.virtual_stages ? str(" v=", l.virtual_stages) : std::string(), ", ", l.chunks,
          " micro-batches", l.sequence_parallel ? ", sequence parallel" : "");
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-12 * std::abs(want.losses[s]))
        << "step " << s << ", " << what;
  double worst = 0;
  for (const auto& [name, p] : want.params) {
    ASSERT_TRUE(got.params.count(name)) << name << " is on no stage, " << what;
    const double error = relative_error(got.params.at(name), p);
    worst = std::max(worst, error);
    EXPECT_LE(error, 1e-12) << name << ", " << what;
  }
  std::printf("%s: worst relative error of a parameter tensor %.3g\n", what.c_str(), worst);
}

TEST(PipelinedGPT, TwoStagesTrainAsOneDeviceWithGPipeAnd1F1B) {
  expect_one_device({.pp = 2, .chunks = 2});
  expect_one_device({.pp = 2, .chunks = 4, .schedule = PipelineSchedule::OneFOneB});
}

TEST(PipelinedGPT, FourStagesTrainAsOneDevice) {
  expect_one_device({.pp = 4, .chunks = 4, .schedule = PipelineSchedule::OneFOneB});
}

TEST(PipelinedGPT, EveryScheduleTrainsAsOneDevice) {
  using S = PipelineSchedule;
  size_t i = 0;
  for (S schedule :
       {S::GPipe, S::OneFOneB, S::Interleaved1F1B, S::ZeroBubbleH1, S::ZeroBubbleV, S::DualPipeV})
    for (int pp : {2, 4})
      for (int64_t chunks : {4, 6, 16}) {
        if (schedule == S::DualPipeV && chunks < 2 * pp) continue;  // needs m ≥ 2p
        if (schedule == S::Interleaved1F1B && chunks % pp != 0 && chunks > pp) continue;
        if (!tandem::testing::runs_case(i++, 5)) continue;
        expect_one_device({.pp = pp, .chunks = chunks, .schedule = schedule});
      }
  // Three chunks per rank, the model in 6 stages over 2 ranks.
  expect_one_device({.pp = 2, .chunks = 4, .schedule = S::Interleaved1F1B, .virtual_stages = 3});
}

TEST(PipelinedGPT, ZeroBubbleComposesWithDataAndTensorParallelism) {
  expect_one_device(
      {.dp = 2, .pp = 2, .tp = 2, .chunks = 4, .schedule = PipelineSchedule::ZeroBubbleV});
  expect_one_device({.pp = 2,
                     .tp = 2,
                     .chunks = 4,
                     .schedule = PipelineSchedule::DualPipeV,
                     .sequence_parallel = true});
}

TEST(PipelinedGPT, PipelineTimesTensorParallelTrainsAsOneDevice) {
  expect_one_device({.pp = 2, .tp = 2, .chunks = 2});
  expect_one_device({.pp = 2,
                     .tp = 2,
                     .chunks = 2,
                     .schedule = PipelineSchedule::OneFOneB,
                     .sequence_parallel = true});
}

TEST(PipelinedGPT, DataTimesPipelineTimesTensorParallelTrainsAsOneDevice) {
  expect_one_device(
      {.dp = 2, .pp = 2, .tp = 2, .chunks = 2, .schedule = PipelineSchedule::OneFOneB});
}

// Two named lists of whole tensors hold the same names and, to 1e-12 relative, the same values.
void expect_same_tensors(const nn::StateDict& got, const nn::StateDict& want,
                         const std::string& what) {
  std::map<std::string, Tensor> by_name(got.begin(), got.end());
  EXPECT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(by_name.count(name)) << name << " missing, " << what;
    const Tensor g = by_name.at(name).to(Device::cpu()).to(t.dtype());
    EXPECT_EQ(g.shape(), t.shape()) << name;
    if (sum(t * t).item() == 0) {
      EXPECT_EQ(sum(g * g).item(), 0) << name;
    } else {
      EXPECT_LE(relative_error(g, t), 1e-12) << name << ", " << what;
    }
  }
}

// The whole state gathered on stage 0 is one device's: its model and AdamW's state under one
// device's names and indices. Loaded into another layout (other pipeline and tensor-parallel
// sizes), training goes on as one device's does.
TEST(PipelinedGPT, CheckpointsAreOneDevicesAndResumeOnAnyLayout) {
  const Trained want = one_device(kSteps + 1);
  const Trained a = pipelined({.pp = 2, .tp = 2, .chunks = 2}, 0, kSteps);
  const Trained until_now = one_device(kSteps);
  expect_same_tensors(a.checkpoint.model, until_now.checkpoint.model, "model, PP × TP = 2 × 2");
  expect_same_tensors(a.checkpoint.optimizer.tensors, until_now.checkpoint.optimizer.tensors,
                      "AdamW's state, PP × TP = 2 × 2");
  EXPECT_EQ(a.checkpoint.optimizer.param_groups_json,
            until_now.checkpoint.optimizer.param_groups_json);
  for (const Layout& b : {Layout{.pp = 4, .chunks = 4, .schedule = PipelineSchedule::OneFOneB},
                          Layout{.pp = 1, .tp = 2, .chunks = 1}}) {
    const Trained resumed = pipelined(b, kSteps, kSteps + 1, &a.checkpoint);
    EXPECT_NEAR(resumed.losses[0], want.losses[kSteps], 1e-12 * want.losses[kSteps]);
    for (const auto& [name, p] : want.params)
      EXPECT_LE(relative_error(resumed.params.at(name), p), 1e-12) << name << ", PP = " << b.pp;
  }
}

// Rank g's own copy of the whole GPT (tensor_parallel_gpt over a group of one copies it), on its
// device: thread ranks must not share the tensors they train.
nn::Sequential own_copy(nn::Sequential& whole, const std::shared_ptr<Communicator>& g) {
  DeviceMesh mesh(g, {g->size(), 1}, {"pp", "tp"});
  return tp::tensor_parallel_gpt(whole, mesh.group("tp"));
}

Tensor loss_of(const Tensor& out, const Tensor& target) { return nn::gpt_loss(out, target); }

// Gradients accumulated over two steps without zeroing them: the tied weight's copies sum what
// each step adds, once (one device: the same two backwards into the same gradients).
TEST(PipelinedGPT, AccumulatedGradientsCountTheTiedWeightOnce) {
  nn::Sequential one = initial_gpt();
  for (int s = 0; s < 2; ++s) {
    const auto [x, y] = batch(s);
    nn::gpt_loss(one(x), y).backward();
  }
  std::map<std::string, Tensor> want;
  for (const auto& [name, p] : one.state_dict()) want[name] = p.grad();

  nn::Sequential whole = initial_gpt();
  std::vector<std::map<std::string, Tensor>> got(2);
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        nn::Sequential model = own_copy(whole, g);
        DistributedPipeline pipe(model, g, {.chunks = 2});
        pipe.stage().to(Device::cpu(g->rank()));
        for (int s = 0; s < 2; ++s) {
          const auto [x, y] = batch(s);
          pipe.step(x, y, loss_of);
        }
        for (const auto& [name, p] : pipe.stage().named_parameters())
          got[size_t(g->rank())][name] = p.grad();
      },
      2);
  EXPECT_TRUE(got[0].count("transformer.wte.weight") && got[1].count("lm_head.weight"));
  for (const auto& stage : got)
    for (const auto& [name, grad] : stage)
      EXPECT_LE(relative_error(grad.to(Device::cpu()), want.at(name)), 1e-12) << name;
}

// Its neighbour, waiting for a gradient in the pipeline's own sub-group, stops at once too (the
// failure reaches every sub-group of the thread world), not at the 5-minute timeout.
TEST(PipelinedGPT, AFailingStageNamesItselfAndItsNeighbourStops) {
  nn::Sequential whole = initial_gpt();
  const std::string msg = error_message<DistributedError>([&] {
    spawn_threads(
        [&](std::shared_ptr<Communicator> g) {
          nn::Sequential model = own_copy(whole, g);
          DistributedPipeline pipe(model, g, {.chunks = 2});
          const auto [x, y] = batch(0);
          pipe.step(x, y, [](const Tensor&, const Tensor&) -> Tensor {
            throw ValueError("the loss function failed");
          });
        },
        2);
  });
  EXPECT_THAT(msg, HasSubstr("the loss function failed"));
  EXPECT_THAT(msg, HasSubstr("pipeline rank 1 of 2 on cpu, stage 1, micro-batch 0 (forward, 1F0)"));
}

// Each rank's timeline of a step runs its order's actions, and every rank can see them all.
TEST(PipelinedGPT, TimelinesFollowTheOrderAndGatherOnEveryRank) {
  nn::Sequential whole = initial_gpt();
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        nn::Sequential model = own_copy(whole, g);
        DistributedPipeline pipe(model, g,
                                 {.chunks = 4, .schedule = PipelineSchedule::ZeroBubbleV});
        const auto [x, y] = batch(0);
        const DistributedPipelineResult r = pipe.step(x, y, loss_of);
        EXPECT_GT(r.peak_activation_bytes, 0);
        const auto all = pipe.gather_timelines(r.timeline);
        ASSERT_EQ(all.size(), 2u);
        for (size_t k = 0; k < 2; ++k) {
          std::vector<PipelineAction> ran;
          for (const TimedAction& t : all[k]) ran.push_back(t.action);
          EXPECT_EQ(ran, pipe.order().ranks[k]) << "rank " << k;
        }
      },
      2);
}

TEST(PipelinedGPT, BadOptionsAreClearErrors) {
  nn::Sequential whole = initial_gpt();
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        EXPECT_THAT(
            error_message<ValueError>([&] { DistributedPipeline(whole, g, {.chunks = 0}); }),
            HasSubstr("chunks = 0"));
        EXPECT_THAT(
            error_message<ValueError>([&] { DistributedPipeline(whole, g, {.balance = {7}}); }),
            HasSubstr("balance has 1 stages but there are 2"));
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel
