// tests/parallel/pipeline_test.cpp — parallel::Pipeline: GPipe and 1F1B over cpu:0/cpu:1 (and
// three stages) train exactly as the whole model on one device (float64, 5 Adam steps,
// 1e-10 abs + 1e-8 rel; float32 with packed weights to 1e-5) for 1, 4 and 7 micro-batches (7
// divides no batch here evenly) with checkpointing never, except_last and always, weight gradients
// with each backward or deferred to one W per stage; interleaved, ZB-H1, ZB-V and DualPipeV over
// 2 and 3 devices too, and a schedule written by hand (a broken one is refused); dropout is
// reproducible; 1F1B holds less than GPipe; bad input and a failing stage are clear errors. The
// CUDA cases compare with the CPU and are skipped, visibly, without a GPU (two GPUs for the
// second).
#include <tandem/parallel/pipeline/pipeline.h>

#include <tandem/core/cpu_info.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/cpu/weight_cache.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

nn::Sequential pipe_mlp(bool dropout = false) {  // 6 × (Linear(16, 16) + Tanh), Linear(16, 10)
  manual_seed(4);
  nn::Sequential s;
  for (int i = 0; i < 6; ++i) {
    s.push_back(nn::Linear(16, 16));
    s.push_back(nn::Tanh());
    if (dropout) s.push_back(nn::Dropout(0.25));
  }
  s.push_back(nn::Linear(16, 10));
  s.to(kFloat64);
  return s;
}

constexpr int64_t kPipeBatch = 30;

Tensor batch_x() {
  manual_seed(9);
  return randn({kPipeBatch, 16}, {.dtype = kFloat64});
}
Tensor batch_y() {
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < kPipeBatch; ++i) labels.push_back((i * 7) % 10);
  return from_vector(labels, {kPipeBatch});
}

Tensor pipe_loss_fn(const Tensor& out, const Tensor& y) { return cross_entropy(out, y); }

// 5 Adam steps of the whole model on one device: the reference.
std::vector<double> train_one_device() {
  nn::Sequential model = pipe_mlp();
  const Tensor x = batch_x(), y = batch_y();
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    pipe_loss_fn(model(x), y).backward();
    opt.step();
  }
  return tandem::testing::flat_params(model);
}

// The same 5 steps through a Pipeline; the losses it reported are checked against the model's.
std::vector<double> train_pipelined(const std::vector<Device>& devices, PipelineOptions options,
                                    bool dropout = false) {
  nn::Sequential model = pipe_mlp(dropout);
  const Tensor x = batch_x(), y = batch_y();
  Pipeline pipe(split(model, devices), options);  // moves the parameters: the optimizer after
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    const PipelineResult r = pipe.step(x, y, pipe_loss_fn);
    EXPECT_EQ(r.output.shape(), (Shape{kPipeBatch, 10}));
    EXPECT_EQ(r.output.device(), devices.back());
    if (!dropout) {  // the reported loss is the batch mean of the outputs it returned
      EXPECT_NEAR(r.loss.item(), pipe_loss_fn(r.output, y.to(devices.back())).item(), 1e-12);
    }
    opt.step();
  }
  model.to(Device::cpu());
  return tandem::testing::flat_params(model);
}

TEST(Pipeline, GPipeAnd1F1BTrainAsOneDevice) {
  const std::vector<double> expected = train_one_device();
  const std::vector<Device> two{Device::cpu(0), Device::cpu(1)};
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB})
    for (int64_t chunks : {1, 4, 7})
      for (PipelineCheckpoint checkpoint :
           {PipelineCheckpoint::Never, PipelineCheckpoint::ExceptLast})
        for (PipelineWeightGrads weight_grads :
             {PipelineWeightGrads::WithBackward, PipelineWeightGrads::Deferred}) {
          SCOPED_TRACE(str(to_string(schedule), ", ", chunks, " chunks, checkpoint ",
                           int(checkpoint), ", weight gradients ", int(weight_grads)));
          tandem::testing::expect_same_params(train_pipelined(two, {.chunks = chunks,
                                                                    .schedule = schedule,
                                                                    .checkpoint = checkpoint,
                                                                    .weight_grads = weight_grads}),
                                              expected);
        }
}

TEST(Pipeline, ThreeStagesAndCheckpointAlwaysTrainAsOneDevice) {
  const std::vector<double> expected = train_one_device();
  const std::vector<Device> three{Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    SCOPED_TRACE(to_string(schedule));
    tandem::testing::expect_same_params(
        train_pipelined(
            three, {.chunks = 7, .schedule = schedule, .checkpoint = PipelineCheckpoint::Always}),
        expected);
  }
}

TEST(Pipeline, EveryScheduleTrainsAsOneDevice) {
  // Interleaved, ZB-V and DualPipeV hold two stages per device (pipeline_devices()); ZB-H1
  // splits each backward into I and W. Same parameters as one device after 5 Adam steps.
  const std::vector<double> expected = train_one_device();
  using S = PipelineSchedule;
  for (S schedule : {S::Interleaved1F1B, S::ZeroBubbleH1, S::ZeroBubbleV, S::DualPipeV})
    for (int64_t ranks : {2, 3})
      for (int64_t chunks : {6, 7}) {
        if (schedule == S::Interleaved1F1B && chunks % ranks != 0) continue;
        SCOPED_TRACE(str(to_string(schedule), ", ", ranks, " ranks, ", chunks, " chunks"));
        std::vector<Device> devices;
        for (int64_t r = 0; r < ranks; ++r) devices.push_back(Device::cpu(int(r)));
        tandem::testing::expect_same_params(
            train_pipelined(pipeline_devices(schedule, devices),
                            {.chunks = chunks, .schedule = schedule}),
            expected);
      }
}

TEST(Pipeline, RunsAScheduleOfOnesOwn) {
  // 1F1B written by hand with the W's of rank 1 at the end: accepted, and exact.
  PipelineOrder order;
  order.micro_batches = 2;
  order.stage_ranks = {0, 1};
  order.ranks = {parse_actions("0F0 0F1 0B0 0B1"), parse_actions("1F0 1I0 1F1 1I1 1W0 1W1")};
  tandem::testing::expect_same_params(
      train_pipelined({Device::cpu(0), Device::cpu(1)}, {.chunks = 2, .order = order}),
      train_one_device());
  // A broken one is refused before the first step, naming the rank and the action.
  order.ranks[1] = parse_actions("1F0 1I0 1F1 1I1 1W0");
  nn::Sequential model = pipe_mlp();
  EXPECT_THAT(
      error_message<ValueError>([&] {
        Pipeline(split(model, {Device::cpu(0), Device::cpu(1)}), {.chunks = 2, .order = order});
      }),
      HasSubstr("rank 1 runs 1I1 but no 1W1"));
}

TEST(Pipeline, TwoStagesOnOneDeviceTrainAsOneDevice) {
  // One worker per stage, not per device: stages sharing a device both make progress.
  tandem::testing::expect_same_params(
      train_pipelined({Device::cpu(1), Device::cpu(1)},
                      {.chunks = 4, .schedule = PipelineSchedule::OneFOneB}),
      train_one_device());
}

// In float32, with weights large enough (512 × 512 = 2^18 elements) that each step packs them
// for oneDNN's backward products on AVX-512 hosts (core/kernels/cpu/weight_cache.h): the pipeline
// still trains as one device, to float32's rounding of differently ordered sums.
TEST(Pipeline, Float32WithPackedWeightsTrainsAsOneDevice) {
  auto model = [] {
    manual_seed(14);
    nn::Sequential s;
    for (int i = 0; i < 2; ++i) {
      s.push_back(nn::Linear(512, 512));
      s.push_back(nn::ReLU());
    }
    s.push_back(nn::Linear(512, 10));
    return s;
  };
  manual_seed(15);
  const Tensor x = randn({64, 512});
  const Tensor y = (rand({64}) * 10.0).to(kInt64);
  auto train = [&](bool pipelined, PipelineSchedule schedule) {
    cpu::clear_weight_cache();
    nn::Sequential m = model();
    std::unique_ptr<Pipeline> pipe;
    if (pipelined)
      pipe = std::make_unique<Pipeline>(split(m, {Device::cpu(0), Device::cpu(1)}),
                                        PipelineOptions{.chunks = 4, .schedule = schedule});
    optim::SGD opt(m.parameters(), {.lr = 0.1});
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      if (pipe)
        pipe->step(x, y, pipe_loss_fn);
      else
        pipe_loss_fn(m(x), y).backward();
      opt.step();
    }
    if (pipe && cpu_info().avx512f) {
      // One a step: the second layer's weight, for dx = dy·W (the first layer's input needs no
      // gradient, the last layer's weight is small).
      EXPECT_EQ(cpu::weight_cache_stats().packs, 3);
    }
    m.to(Device::cpu());
    return tandem::testing::flat_params(m);
  };
  const std::vector<double> expected = train(false, PipelineSchedule::GPipe);
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
    const std::vector<double> got = train(true, schedule);
    ASSERT_EQ(got.size(), expected.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - expected[i]));
    EXPECT_LT(worst, 1e-5) << to_string(schedule);
  }
}

// The same cases on a GPU: both stages on cuda:0, and a CPU stage feeding a GPU stage.
TEST(PipelineCuda, StagesOnCuda0TrainAsOneCpuDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const std::vector<double> expected = train_one_device();
  tandem::testing::expect_same_params(
      train_pipelined({Device::cuda(0), Device::cuda(0)},
                      {.chunks = 4, .schedule = PipelineSchedule::OneFOneB}),
      expected);
  tandem::testing::expect_same_params(
      train_pipelined({Device::cpu(0), Device::cuda(0)},
                      {.chunks = 7, .checkpoint = PipelineCheckpoint::ExceptLast}),
      expected);
}

TEST(PipelineCuda, TwoGpusTrainAsOneCpuDevice) {
  if (cuda::device_count() < 2)
    GTEST_SKIP() << "needs 2 CUDA devices, " << cuda::device_count() << " visible";
  const std::vector<double> expected = train_one_device();
  for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB})
    tandem::testing::expect_same_params(
        train_pipelined({Device::cuda(0), Device::cuda(1)}, {.chunks = 7, .schedule = schedule}),
        expected);
}

TEST(Pipeline, DropoutIsReproducible) {
  const std::vector<Device> two{Device::cpu(0), Device::cpu(1)};
  const PipelineOptions gpipe{.chunks = 4, .checkpoint = PipelineCheckpoint::ExceptLast};
  const std::vector<double> a = train_pipelined(two, gpipe, /*dropout=*/true);
  EXPECT_EQ(a, train_pipelined(two, gpipe, true)) << "two runs differ";
  // Each stage draws forward by forward, in micro-batch order, whatever the schedule: the same
  // masks (the gradients are summed in another order, hence a tolerance, not the same bits).
  tandem::testing::expect_same_params(
      train_pipelined(two, {.chunks = 4, .schedule = PipelineSchedule::OneFOneB}, true), a);
  EXPECT_NE(a, train_one_device()) << "dropout had no effect";
}

TEST(Pipeline, EvaluateMatchesTheModel) {
  nn::Sequential model = pipe_mlp();
  const Tensor x = batch_x(), expected = model(x).detach();
  Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}), {.chunks = 7});
  const Tensor out = pipe.evaluate(x);
  EXPECT_FALSE(out.requires_grad());
  const Tensor diff = out.to(Device::cpu()) - expected;
  EXPECT_LT((diff * diff).sum().item(), 1e-24);
}

TEST(Pipeline, OneFOneBHoldsFewerActivationsThanGPipe) {
  auto peaks = [](PipelineSchedule schedule) {
    nn::Sequential model = pipe_mlp();
    Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}),
                  {.chunks = 8, .schedule = schedule});
    const Tensor x = randn({256, 16}, {.dtype = kFloat64});
    const Tensor y = zeros({256}, {.dtype = kInt64});
    pipe.step(x, y, pipe_loss_fn);  // the first step allocates the parameters' .grad
    return pipe.step(x, y, pipe_loss_fn).peak_activation_bytes;
  };
  const std::vector<int64_t> gpipe = peaks(PipelineSchedule::GPipe);
  const std::vector<int64_t> one_f_one_b = peaks(PipelineSchedule::OneFOneB);
  ASSERT_EQ(gpipe.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_GT(one_f_one_b[k], 0);
    EXPECT_LE(2 * one_f_one_b[k], gpipe[k]) << "stage " << k;
  }
}

// return_outputs = false: the same loss and gradients, no output, and the last stage no longer
// keeps every micro-batch's output until the step ends.
TEST(Pipeline, WithoutOutputsTheLastStageHoldsLess) {
  auto run = [](bool outputs) {
    manual_seed(5);
    nn::Sequential model = pipe_mlp();
    Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}),
                  {.chunks = 8, .schedule = PipelineSchedule::OneFOneB, .return_outputs = outputs});
    manual_seed(6);
    const Tensor x = randn({256, 16}, {.dtype = kFloat64});
    const Tensor y = zeros({256}, {.dtype = kInt64});
    pipe.step(x, y, pipe_loss_fn);  // the first step allocates the parameters' .grad
    PipelineResult r = pipe.step(x, y, pipe_loss_fn);
    return std::pair{r, pipe.stages()[1].modules.parameters()[0].grad().clone()};
  };
  const auto [with, grad_with] = run(true);
  const auto [without, grad_without] = run(false);
  EXPECT_TRUE(with.output.defined());
  EXPECT_FALSE(without.output.defined());
  EXPECT_EQ(with.loss.item(), without.loss.item());
  EXPECT_EQ(grad_with.to_vector<double>(), grad_without.to_vector<double>());
  EXPECT_LT(without.peak_activation_bytes[1], with.peak_activation_bytes[1]);
}

TEST(Pipeline, BadInputIsAClearError) {
  nn::Sequential model = pipe_mlp();
  Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}), {.chunks = 8});
  const Tensor x = randn({5, 16}, {.dtype = kFloat64});
  const Tensor y = zeros({5}, {.dtype = kInt64});
  EXPECT_THAT(error_message<ValueError>([&] { pipe.step(x, y, pipe_loss_fn); }),
              HasSubstr("8 chunks but the batch has only 5 samples"));
  EXPECT_THAT(error_message<ShapeError>([&] { pipe.step(batch_x(), y, pipe_loss_fn); }),
              HasSubstr("batch has 30 samples but the target's shape is [5]"));
  EXPECT_THAT(error_message<ValueError>(
                  [&] { pipe.step(batch_x().requires_grad_(), batch_y(), pipe_loss_fn); }),
              HasSubstr("the input requires grad"));
  EXPECT_THAT(error_message<ValueError>([&] {
                NoGradGuard off;
                pipe.step(batch_x(), batch_y(), pipe_loss_fn);
              }),
              HasSubstr("use evaluate()"));
  EXPECT_THAT(error_message<ValueError>([&] { Pipeline({}, {}); }), HasSubstr("no stages"));
  EXPECT_THAT(error_message<ValueError>([&] {
                Pipeline(split(model, {Device::cpu(0), Device::cpu(1)}), {.chunks = 0});
              }),
              HasSubstr("chunks = 0"));
}

struct FailsOnBatch : nn::Module {  // throws in forward or backward when it sees `bad` rows
  FailsOnBatch(int64_t bad, bool in_backward) : bad(bad), in_backward(in_backward) {}
  int64_t bad;
  bool in_backward;
  Tensor forward(const Tensor& x) {
    if (x.size(0) != bad) return x;
    if (!in_backward) tandem::detail::fail<DTypeError>("this batch is cursed");
    Tensor y = x * 1.0;
    y.register_hook(
        [](const Tensor&) -> Tensor { tandem::detail::fail<DTypeError>("cursed gradient"); });
    return y;
  }
  void visit(nn::Visitor&) override {}
};

TEST(Pipeline, AFailingStageStopsThePipelineAndNamesItself) {
  for (const bool in_backward : {false, true})
    for (PipelineSchedule schedule : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB}) {
      SCOPED_TRACE(str(to_string(schedule), in_backward ? ", backward" : ", forward"));
      nn::Sequential model = pipe_mlp();
      model.push_back(FailsOnBatch(4, in_backward));  // the 4-row chunks
      Pipeline pipe(split(model, {Device::cpu(0), Device::cpu(1)}, {4, 10}),
                    {.chunks = 7, .schedule = schedule});
      const std::string message =
          error_message<DTypeError>([&] { pipe.step(batch_x(), batch_y(), pipe_loss_fn); });
      // 30 samples in 7: 5 5 4 4 4 4 4; micro-batch 2 is the first 4-row one, and the first to
      // fail in forward; in backward GPipe reaches micro-batch 6 first, 1F1B micro-batch 2.
      const int failing = !in_backward || schedule == PipelineSchedule::OneFOneB ? 2 : 6;
      // GPipe defers weight gradients: its backwards are I's (the input's half).
      const std::string action = !in_backward ? "forward, 1F2"
                                 : schedule == PipelineSchedule::GPipe
                                     ? "backward of the input, 1I6"
                                     : "backward, 1B2";
      EXPECT_THAT(message, HasSubstr(str("pipeline rank 1 on cpu:1, stage 1, micro-batch ", failing,
                                         " (", action, ")")));
      EXPECT_THAT(message, HasSubstr(in_backward ? "cursed gradient" : "this batch is cursed"));
      // Nothing is left blocked: the pipeline runs again.
      nn::Sequential fine = pipe_mlp();
      Pipeline again(split(fine, {Device::cpu(0), Device::cpu(1)}), {.chunks = 7});
      EXPECT_NO_THROW(again.step(batch_x(), batch_y(), pipe_loss_fn));
      EXPECT_THROW(pipe.step(batch_x(), batch_y(), pipe_loss_fn), DTypeError);
    }
}

}  // namespace
}  // namespace tandem::parallel
