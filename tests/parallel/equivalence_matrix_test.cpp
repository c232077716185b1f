// The equivalence matrix: every stack of the parallel modes that fits 8 thread ranks (88) trains
// the drawn GPT (2 layers, float64, a vocabulary of 37 that divides by nothing, padded to 40 rows)
// as one device does. Data parallelism {none, DDP, ZeRO-1, ZeRO-2, fully_shard} over 2 ranks × {no
// TP, TP 2, TP 2 + SP} × {no PP, PP 2 with GPipe, with 1F1B} × {activation checkpointing off, on},
// built as `tandem train` stacks them (stacked_layouts.h): for 3 AdamW steps with a clip that
// bites, each step's loss and gradient norm, the last step's clipped gradients (put together
// whole, parallel::full_gradients), and the parameters and AdamW state after them (read back
// whole from the run's sharded checkpoint), are one device's, ≤ 1e-10 relative; a tied weight's
// copies on a pipeline's first and last stages are bit-identical. Then every stack again under
// bf16 autocast, against one device under it, to bfloat16's precision (below). Under a sanitizer,
// every third stack of each sweep (support/sanitizer.h): every mode still, in a third of the time.
#include <gtest/gtest.h>
#include <tandem/parallel/sharded_checkpoint.h>
#include <tandem/parallel/whole_state.h>

#include <cmath>
#include <functional>
#include <map>

#include "data/temp_dir.h"
#include "parallel/stacked_layouts.h"
#include "support/expect.h"
#include "support/sanitizer.h"

namespace tandem::parallel::equivalence_matrix_test {  // named: unity builds join test files
namespace {

using tandem::testing::error_message;
using tandem::testing::stacked::Data;
using tandem::testing::stacked::Member;
using tandem::testing::stacked::Stack;
using tandem::testing::stacked::StepOutcome;
using ::testing::HasSubstr;

constexpr int kSteps = 3;
constexpr double kTolerance = 1e-10;

double relative_error(const Tensor& a, const Tensor& b) {
  const double scale = std::sqrt(sum(b * b).item());
  return std::sqrt(sum((a - b) * (a - b)).item()) / (scale > 0 ? scale : 1);
}

double relative_error(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-300);
}

struct Reference {
  std::vector<StepOutcome> steps;
  nn::StateDict grads;  // the last step's, clipped
  nn::StateDict params;
  optim::OptimizerState state;
};

Reference one_device(int64_t heads = 4, double dropout = 0) {
  Reference out;
  Member m = tandem::testing::stacked::build(Stack{.heads = heads, .dropout = dropout},
                                             make_thread_group(1)[0]);
  for (int s = 0; s < kSteps; ++s) out.steps.push_back(m.step(s));
  out.grads = full_gradients(*m.table, nullptr);
  out.params = m.model->named_parameters();
  out.state = m.local->state_dict();
  return out;
}

// Rank 0's outcome of each of kSteps steps of `stack`; `after(m, world)` on every rank then.
std::vector<StepOutcome> run(const Stack& stack,
                             const std::function<void(Member&, Communicator&)>& after = {}) {
  std::vector<StepOutcome> got(kSteps);
  spawn_threads(
      [&](std::shared_ptr<Communicator> world) {
        Member m = tandem::testing::stacked::build(stack, world);
        for (int s = 0; s < kSteps; ++s) {
          const StepOutcome o = m.step(s);
          if (world->rank() == 0) got[size_t(s)] = o;
        }
        if (after) after(m, *world);
      },
      stack.world());
  return got;
}

// Data parallelism over 2 ranks of each kind, or none (one data rank: TP and PP alone).
std::vector<Stack> every_stack() {
  std::vector<Stack> out;
  for (int data = -1; data < 4; ++data)  // none, DDP, ZeRO-1, ZeRO-2, fully_shard
    for (int tp : {0, 1, 2})             // no TP, TP, TP + SP
      for (int pp : {0, 1, 2})           // no PP, GPipe, 1F1B
        for (bool checkpointed : {false, true}) {
          if (data < 0 && tp == 0 && pp == 0) continue;  // one device itself
          out.push_back({.data = data < 0 ? Data::DDP : Data(data),
                         .dp = data < 0 ? 1 : 2,
                         .tp = tp > 0 ? 2 : 1,
                         .pp = pp > 0 ? 2 : 1,
                         .sp = tp == 2,
                         .schedule = pp == 1 ? PipelineSchedule::GPipe : PipelineSchedule::OneFOneB,
                         .checkpointed = checkpointed});
        }
  return out;
}

// Runs `stack` for kSteps steps and checks its losses, norms and last gradients, and (read back
// whole from its sharded checkpoint in `dir`) its parameters and AdamW state, against one
// device's, to `tolerance` relative.
void expect_one_devices_run(const Stack& stack, const Reference& want, const std::string& dir,
                            double tolerance) {
  const std::string what = stack.str();
  nn::StateDict grads;
  const std::vector<StepOutcome> got = run(stack, [&](Member& m, Communicator& world) {
    EXPECT_EQ(m.tied_difference(), 0.0) << what << ": the tied weight's copies";
    nn::StateDict whole = full_gradients(*m.table, &world);
    if (world.rank() == 0) grads = std::move(whole);
    save_sharded_checkpoint(dir, kSteps, world, *m.table, m.model->named_buffers(), m.local);
  });
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_LE(relative_error(got[size_t(s)].loss, want.steps[size_t(s)].loss), tolerance)
        << what << ": the loss of step " << s;
    EXPECT_LE(relative_error(got[size_t(s)].norm, want.steps[size_t(s)].norm), tolerance)
        << what << ": the gradient norm of step " << s;
  }
  ASSERT_EQ(grads.size(), want.grads.size()) << what;
  for (size_t k = 0; k < want.grads.size(); ++k) {
    EXPECT_EQ(grads[k].first, want.grads[k].first) << what;
    EXPECT_LE(relative_error(grads[k].second, want.grads[k].second), tolerance)
        << what << ": the gradient of " << want.grads[k].first;
  }
  // The run's parameters and AdamW state, read whole on one process.
  Member whole =
      tandem::testing::stacked::build(Stack{.heads = stack.heads}, make_thread_group(1)[0]);
  load_sharded_checkpoint(dir, *whole.table, whole.model->named_buffers(), whole.local);
  const nn::StateDict params = whole.model->named_parameters();
  for (size_t k = 0; k < want.params.size(); ++k)
    EXPECT_LE(relative_error(params[k].second, want.params[k].second), tolerance)
        << what << ": " << want.params[k].first;
  const optim::OptimizerState state = whole.local->state_dict();
  const std::map<std::string, Tensor> by_key(state.tensors.begin(), state.tensors.end());
  for (const auto& [key, t] : want.state.tensors) {
    ASSERT_TRUE(by_key.count(key)) << what << ": no " << key;
    if (t.dim() > 0) {
      EXPECT_LE(relative_error(by_key.at(key), t), tolerance) << what << ": " << key;
    } else {
      EXPECT_EQ(by_key.at(key).item(), t.item()) << what << ": " << key;  // Adam's step
    }
  }
}

TEST(EquivalenceMatrix, EveryStackTrainsAsOneDevice) {
  const Reference want = one_device();
  for (int s = 0; s < kSteps; ++s) EXPECT_GT(want.steps[size_t(s)].norm, 0.3) << "must bite";
  double squares = 0;  // the gradients compared are the clipped ones, not zeros
  for (const auto& [name, g] : want.grads) squares += sum(g * g).item();
  EXPECT_NEAR(std::sqrt(squares), 0.3, 1e-5);  // clip_grad_norm_: max / (norm + 1e-6)
  tandem::testing::TempDir tmp;
  const std::vector<Stack> stacks = every_stack();
  EXPECT_EQ(stacks.size(), 88u);
  for (size_t i = 0; i < stacks.size(); ++i)
    if (tandem::testing::runs_case(i, 3))
      expect_one_devices_run(stacks[i], want, tmp.file("run-" + std::to_string(i)), kTolerance);
}

// The schedules past 1F1B under each data mode (DP × PP = 2 × 2, 2 micro-batches per data
// rank): interleaved (4 stages), ZB-H1 (B split into I and W), ZB-V (each rank holds the first
// and last stages: under fully_shard, the tied embedding and head are one shared unit run by
// two stages); DualPipeV, which needs m ≥ 2p, on all 4 rows alone and with TP. To 1e-12.
TEST(EquivalenceMatrix, EveryPipelineScheduleStacksWithEveryDataMode) {
  const Reference want = one_device();
  tandem::testing::TempDir tmp;
  std::vector<Stack> stacks;
  for (PipelineSchedule schedule : {PipelineSchedule::Interleaved1F1B,
                                    PipelineSchedule::ZeroBubbleH1, PipelineSchedule::ZeroBubbleV})
    for (Data data : {Data::DDP, Data::Zero1, Data::Zero2, Data::FullyShard})
      stacks.push_back({.data = data, .dp = 2, .pp = 2, .schedule = schedule});
  stacks.push_back({.pp = 2, .schedule = PipelineSchedule::DualPipeV, .chunks = 4});
  stacks.push_back(
      {.tp = 2, .pp = 2, .sp = true, .schedule = PipelineSchedule::DualPipeV, .chunks = 4});
  stacks.push_back({.data = Data::FullyShard,
                    .dp = 2,
                    .pp = 2,
                    .schedule = PipelineSchedule::ZeroBubbleV,
                    .checkpointed = true});
  for (size_t i = 0; i < stacks.size(); ++i)
    if (tandem::testing::runs_case(i, 3))
      expect_one_devices_run(stacks[i], want, tmp.file("schedule-" + std::to_string(i)), 1e-12);
}

// fully_shard reduces when a rank's last backward of the step is done, which for an I means its
// W: an order of one's own whose last I's W is not the rank's last W is refused, naming both.
TEST(EquivalenceMatrix, FullyShardRefusesAnOrderWhoseLastWeightsComeEarly) {
  PipelineOrder order;
  order.micro_batches = 2;
  order.stage_ranks = {0};
  order.ranks = {parse_actions("0F0 0F1 0I0 0I1 0W1 0W0")};
  nn::Sequential model = tandem::testing::stacked::gpt(false, 4, 0);
  auto pipe = std::make_shared<DistributedPipeline>(
      model, make_thread_group(1)[0], DistributedPipelineOptions{.chunks = 2, .order = order});
  FullyShardedModule fsdp(std::shared_ptr<nn::Sequential>(pipe, &pipe->stage()),
                          FullyShardOptions{.group = make_thread_group(1)[0]});
  EXPECT_THAT(error_message<ValueError>([&] { fully_shard_stages(*pipe, fsdp); }),
              HasSubstr("rank 0's last backward is 0I1 but its last weight gradient is 0W0"));
}

// Context parallelism alone and under each of the other modes (the drawn GPT's 8 positions over
// up to 8 ranks, its 4 heads over up to 4 for Ulysses), to 1e-12.
std::vector<Stack> context_parallel_stacks() {
  using cp::Algorithm;
  using cp::SequenceSplit;
  const Algorithm ring = Algorithm::Ring, ulysses = Algorithm::Ulysses;
  const SequenceSplit zigzag = SequenceSplit::ZigZag, contiguous = SequenceSplit::Contiguous;
  return {
      {.cp = 2, .cp_algorithm = ring, .cp_split = zigzag},
      {.cp = 2, .cp_algorithm = ring, .cp_split = contiguous},
      {.cp = 4, .cp_algorithm = ring, .cp_split = zigzag},
      {.cp = 8, .cp_algorithm = ring, .cp_split = contiguous},
      {.cp = 2, .cp_algorithm = ulysses, .cp_split = zigzag},
      {.cp = 4, .cp_algorithm = ulysses, .cp_split = contiguous},
      {.cp = 2, .cp_algorithm = ring, .checkpointed = true},
      {.data = Data::DDP, .dp = 2, .cp = 2},
      {.data = Data::Zero1, .dp = 2, .cp = 2, .cp_algorithm = ulysses},
      {.data = Data::Zero2, .dp = 2, .cp = 2},
      {.data = Data::FullyShard, .dp = 2, .cp = 2},
      {.data = Data::FullyShard, .cp = 2},  // sharded over the context ranks alone
      {.tp = 2, .cp = 2},
      {.tp = 2, .cp = 2, .sp = true},
      {.tp = 2, .cp = 2, .cp_algorithm = ulysses},
      {.pp = 2, .cp = 2},
      {.pp = 2, .cp = 2, .cp_algorithm = ulysses, .schedule = PipelineSchedule::GPipe},
      {.data = Data::FullyShard, .dp = 2, .tp = 2, .cp = 2},
      {.data = Data::DDP, .dp = 2, .pp = 2, .cp = 2},
  };
}

TEST(EquivalenceMatrix, ContextParallelStacksTrainAsOneDevice) {
  const Reference want = one_device();
  tandem::testing::TempDir tmp;
  int i = 0;
  for (const Stack& stack : context_parallel_stacks())
    expect_one_devices_run(stack, want, tmp.file("cp-" + std::to_string(i++)), 1e-12);
  // Ulysses over 8 ranks needs 8 heads: the drawn GPT with heads of 2.
  const Stack eight{.cp = 8,
                    .cp_algorithm = cp::Algorithm::Ulysses,
                    .cp_split = cp::SequenceSplit::Contiguous,
                    .heads = 8};
  expect_one_devices_run(eight, one_device(8), tmp.file("cp-8-ulysses"), 1e-12);
}

// With dropout everywhere nanoGPT has it (the embedding's, the attention probabilities', the
// residual branches'), context parallelism draws one device's numbers at each rank's positions:
// every context-parallel stack of one data rank trains as one device does with dropout, to 1e-12,
// ring and Ulysses, either split, blocks recomputed or not. (Data, tensor and pipeline ranks draw
// masks of their own, as their modes do, so they are compared without dropout, above.)
TEST(EquivalenceMatrix, ContextParallelWithDropoutDrawsOneDevicesMasks) {
  using cp::Algorithm;
  using cp::SequenceSplit;
  constexpr double kDropout = 0.2;
  const Reference want = one_device(4, kDropout);
  tandem::testing::TempDir tmp;
  int i = 0;
  for (Stack stack : std::vector<Stack>{
           {.cp = 2, .cp_algorithm = Algorithm::Ring, .cp_split = SequenceSplit::ZigZag},
           {.cp = 4, .cp_algorithm = Algorithm::Ring, .cp_split = SequenceSplit::Contiguous},
           {.cp = 8, .cp_algorithm = Algorithm::Ring, .cp_split = SequenceSplit::Contiguous},
           {.cp = 2, .cp_algorithm = Algorithm::Ulysses, .cp_split = SequenceSplit::ZigZag},
           {.cp = 4, .cp_algorithm = Algorithm::Ulysses, .cp_split = SequenceSplit::ZigZag},
           {.cp = 2, .cp_algorithm = Algorithm::Ring, .checkpointed = true},
       }) {
    stack.dropout = kDropout;
    expect_one_devices_run(stack, want, tmp.file("drop-" + std::to_string(i++)), 1e-12);
  }
  const Stack eight{.cp = 8,
                    .cp_algorithm = Algorithm::Ulysses,
                    .cp_split = SequenceSplit::Contiguous,
                    .heads = 8,
                    .dropout = kDropout};
  expect_one_devices_run(eight, one_device(8, kDropout), tmp.file("drop-8"), 1e-12);
  // The masks bite: a run without them is far from these.
  const Reference without = one_device(4, 0);
  EXPECT_GT(std::abs(without.steps[0].loss - want.steps[0].loss), 1e-3) << "dropout must bite";
}

// Under bfloat16 autocast (tandem train --amp bf16: float32 weights, the forward's products in
// bfloat16, the gradients and AdamW in float32) every stack trains as one device does under it,
// to bfloat16's precision, not float64's: each stack sums its products in another order, and a
// rounding that flips moves a value by 2^-8 of itself. So the loss and the gradient norm of each
// step are compared, within bounds about 10× the worst seen over the 88 stacks; the parameters
// are not (AdamW divides by √v: an element whose gradient is rounding noise moves by lr either
// way). A rank off autocast, or a gradient in the wrong dtype, is far outside the bounds.
TEST(EquivalenceMatrix, EveryStackUnderBf16AutocastTrainsAsOneDeviceUnderIt) {
  constexpr double kLoss = 2e-3, kNorm = 2e-2;
  Member one = tandem::testing::stacked::build(Stack{.bf16 = true}, make_thread_group(1)[0]);
  std::vector<StepOutcome> want;
  for (int s = 0; s < kSteps; ++s) want.push_back(one.step(s));
  double worst_loss = 0, worst_norm = 0;
  const std::vector<Stack> stacks = every_stack();
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (!tandem::testing::runs_case(i + 1, 3)) continue;  // not the stacks of the sweep above
    Stack stack = stacks[i];
    stack.bf16 = true;
    const std::string what = stack.str();
    const std::vector<StepOutcome> got = run(stack);
    for (int s = 0; s < kSteps; ++s) {
      const double loss = relative_error(got[size_t(s)].loss, want[size_t(s)].loss);
      const double norm = relative_error(got[size_t(s)].norm, want[size_t(s)].norm);
      worst_loss = std::max(worst_loss, loss);
      worst_norm = std::max(worst_norm, norm);
      EXPECT_LE(loss, kLoss) << what << ": the loss of step " << s;
      EXPECT_LE(norm, kNorm) << what << ": the gradient norm of step " << s;
    }
  }
  std::printf("bf16 autocast, 88 stacks: worst relative error of a loss %.3g, of a norm %.3g\n",
              worst_loss, worst_norm);
}

}  // namespace
}  // namespace tandem::parallel::equivalence_matrix_test
