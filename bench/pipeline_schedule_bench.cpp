// bench/pipeline_schedule_bench.cpp — the six pipeline schedules at p = 4 ranks (cpu:0..3, thread
// ranks of one process), m = 8 micro-batches, in one run, measured beside the simulator.
//
// 1. Bubble and memory, with timed stages: the model is 8 Linear(256, 256) layers whose forward,
//    input-gradient and weight-gradient parts each also sleep a fixed time (4 ms per layer), so
//    that 4 ranks on 2 cores behave as 4 devices of equal speed (a sleeping rank takes no core).
//    GPipe, 1F1B and ZB-H1 give each rank 2 layers; interleaved (v = 2), ZB-V and DualPipeV give
//    each of their 8 stages 1 layer: the same work per rank. Per schedule: each rank's measured
//    idle share of the step (the last of 3 steps) against simulate() fed with that step's own
//    measured action costs (measured_costs), and each rank's peak memory above the step's start
//    in units of one layer's input for one micro-batch (32 KiB) against the simulator's count of
//    layer inputs held (from F until B, or W after I). The measurement also holds what the
//    simulator does not count: a stage's output until its backward, messages, gradients in flight.
// 2. The GPT on 4 stages (8 blocks, 128 wide, context 64, batch 16, float32, one intra-op thread
//    per rank): the median step time of each schedule over interleaved rounds, against 1F1B's.
//    On 2 cores, 4 computing ranks share the cores: this measures the schedules' overheads
//    (messages, splitting B into I and W), not their bubbles, which part 1 measures.
// --svg DIR writes each schedule's simulated timeline (F = I = W per layer) and its measured one
// from part 1 as SVG (docs/img/pipeline/ holds the ones in docs/parallelism.md).
//   build-bench/bench/pipeline_schedule_bench [--rounds N] [--quick] [--svg DIR]
#include <tandem/parallel/pipeline/schedule_svg.h>
#include <tandem/tandem.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "bench_util.h"

using namespace tandem;
using namespace tandem::parallel;

namespace {

constexpr int kRanks = 4, kChunks = 8, kLayers = 8;
constexpr int64_t kWidth = 256, kRows = 32 * kChunks;
constexpr double kLayerMs = 4;
using S = PipelineSchedule;
const S kSchedules[] = {S::GPipe,        S::OneFOneB,    S::Interleaved1F1B,
                        S::ZeroBubbleH1, S::ZeroBubbleV, S::DualPipeV};

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1e3)));
}

// A Linear layer that also takes kLayerMs in each of its forward, input-gradient and
// weight-gradient parts (the weight's hook runs where its gradient is added: in B, or in W).
struct TimedLinear : nn::Linear {
  // Made on its rank's device: the hook belongs to this weight tensor (a move would make another).
  explicit TimedLinear(Device device)
      : nn::Linear(kWidth, kWidth, {.bias = false, .tensor = {.device = device}}) {
    weight.register_hook([](const Tensor&) {
      sleep_ms(kLayerMs);
      return Tensor();
    });
  }
  Tensor forward(const Tensor& x) const {
    sleep_ms(kLayerMs);
    Tensor y = nn::Linear::forward(x);
    if (y.requires_grad())
      y.register_hook([](const Tensor&) {
        sleep_ms(kLayerMs);
        return Tensor();
      });
    return y;
  }
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct Timed {
  std::vector<std::vector<TimedAction>> timelines;  // the last step's, per rank
  std::vector<int64_t> peak;                        // per rank, bytes
  PipelineOrder order;
};

Timed run_timed(S schedule) {
  Timed out;
  out.peak.resize(kRanks);
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        IntraOpThreadsGuard one(1);
        manual_seed(1);
        nn::Sequential model;
        const Device dev = Device::cpu(g->rank());
        for (int i = 0; i < kLayers; ++i) model.push_back(TimedLinear(dev));
        DistributedPipeline pipe(
            model, g, {.chunks = kChunks, .schedule = schedule, .return_outputs = false});
        manual_seed(2);
        const Tensor x = randn({kRows, kWidth}).to(dev), y = randn({kRows, kWidth}).to(dev);
        const auto loss = [](const Tensor& out, const Tensor& t) { return mse_loss(out, t); };
        DistributedPipelineResult r;
        {  // gradients allocated before the step: its peak is then the activations' and messages'
          NoGradGuard no_grad;
          for (Tensor& p : pipe.stage().parameters()) p.set_grad(zeros_like(p));
        }
        for (int step = 0; step < 3; ++step) {
          {
            NoGradGuard no_grad;
            for (Tensor& p : pipe.stage().parameters()) p.grad().zero_();
          }
          r = pipe.step(x, y, loss);
        }
        auto all = pipe.gather_timelines(r.timeline);
        out.peak[size_t(g->rank())] = r.peak_activation_bytes;
        if (g->rank() == 0) out.timelines = std::move(all), out.order = pipe.order();
      },
      kRanks);
  return out;
}

// Part 2's model: the same GPT on every rank (same seed), float32.
nn::Sequential gpt() {
  manual_seed(3);
  return nn::gpt({.block_size = 64,
                  .vocab_size = 65,
                  .n_layer = 8,
                  .n_head = 4,
                  .n_embd = 128,
                  .dropout = 0.0,
                  .bias = true});
}

}  // namespace

int main(int argc, char** argv) {
  std::string svg_dir;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--svg" && i + 1 < argc)
      svg_dir = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  const bench::Args args = bench::parse_args(int(rest.size()), rest.data(), 5);
  bench::report_load();

  // ---- 1. bubble and memory, timed stages.
  std::printf(
      "1. %d x Linear(%ld, %ld) + %.0f ms sleep in each F, I and W per layer; p = %d ranks "
      "(threads, cpu:0..3), m = %d, batch %ld\n",
      kLayers, long(kWidth), long(kWidth), kLayerMs, kRanks, kChunks, long(kRows));
  std::printf("%-12s %8s %26s %26s %6s %22s %22s\n", "schedule", "step ms", "idle measured (r0..3)",
              "idle simulated (r0..3)", "max pp", "held measured (units)", "held simulated");
  double unit = 0;  // bytes of one layer input for one micro-batch
  double worst_pp = 0;
  for (S schedule : kSchedules) {
    const Timed t = run_timed(schedule);
    // Memory in units of one layer input for one micro-batch (a V or interleaved stage is 1
    // layer, the others 2). A stage's F allocates its Linears' inputs (stage 0's first is the
    // batch's, already there) and its output, which the backward starts from: held until B or
    // I. After an I, its W still reads each Linear's input and output gradient.
    const double layers = double(kLayers) / double(t.order.stages());
    ActionCosts costs = measured_costs(t.order, t.timelines);
    for (size_t st = 0; st < costs.stages.size(); ++st) {
      const double given = st == 0 ? 1 : 0;  // stage 0's input: the batch, not allocated
      costs.stages[st].activation = layers + 1 - given;
      costs.stages[st].weight_inputs = 2 * layers - given;
    }
    const Simulation sim = simulate(t.order, costs);
    const std::vector<double> idle = idle_shares(t.timelines);
    double first = 1e300, last = 0, most = 0;
    for (const auto& line : t.timelines)
      for (const TimedAction& a : line)
        first = std::min(first, a.start), last = std::max(last, a.end);
    unit = double(kRows / kChunks * kWidth * 4);  // one layer's float32 input, one micro-batch
    std::string im, is, hm, hs;
    for (int r = 0; r < kRanks; ++r) {
      im += str(r ? " " : "", int(100 * idle[size_t(r)] + 0.5));
      is += str(r ? " " : "", int(100 * sim.ranks[size_t(r)].idle_share + 0.5));
      most = std::max(most, 100 * std::abs(idle[size_t(r)] - sim.ranks[size_t(r)].idle_share));
      hm += str(r ? " " : "", int(double(t.peak[size_t(r)]) / unit + 0.5));
      hs += str(r ? " " : "", int(sim.ranks[size_t(r)].peak_memory + 0.5));
    }
    worst_pp = std::max(worst_pp, most);
    std::printf("%-12s %8.0f %26s %26s %6.1f %22s %22s\n", to_string(schedule).c_str(),
                (last - first) * 1e3, im.c_str(), is.c_str(), most, hm.c_str(), hs.c_str());
    if (!svg_dir.empty()) {
      write_file(svg_dir + "/measured-" + to_string(schedule) + ".svg",
                 schedule_svg(t.timelines, str(to_string(schedule), ", p = 4, m = 8: measured (",
                                               int((last - first) * 1e3 + 0.5), " ms)")));
      const double per = double(kLayers) / double(t.order.stages());  // layers per stage
      const ActionCosts unit_costs{
          .stages = {{.forward = per, .backward_input = per, .backward_weight = per}}};
      write_file(svg_dir + "/" + to_string(schedule) + ".svg",
                 schedule_svg(timelines(simulate(t.order, unit_costs)),
                              str(to_string(schedule), ", p = 4, m = 8: simulated, F = I = W")));
    }
  }
  std::printf(
      "idle: 1 - compute time / step, in %%; simulated: simulate() with the step's own "
      "median F, I, W per stage;\nmax pp: the largest |measured - simulated| over the "
      "ranks, in percentage points (worst %.1f)\nheld: the rank's peak memory above the "
      "step's start (weight gradients allocated before it; return_outputs = false) over one\n  "
      "layer's input for one micro-batch (%.0f KiB); simulated: the stages' Linear inputs and\n  "
      "output from F to B or I, then W's inputs and output gradients until W; messages are "
      "not counted\n",
      worst_pp, unit / 1024);

  // ---- 2. the GPT, each schedule against 1F1B.
  const int rounds = args.quick ? 1 : args.rounds;
  std::vector<std::vector<double>> ms(std::size(kSchedules));
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        IntraOpThreadsGuard one(1);
        nn::Sequential model = gpt();
        std::vector<std::unique_ptr<DistributedPipeline>> pipes;
        for (S schedule : kSchedules)  // the same modules under each schedule's cut
          pipes.push_back(std::make_unique<DistributedPipeline>(
              model, g, DistributedPipelineOptions{.chunks = kChunks, .schedule = schedule}));
        model.to(Device::cpu(g->rank()));
        manual_seed(4);
        const Tensor ids = (rand({16, 64}) * 65.0).to(kInt64).to(Device::cpu(g->rank()));
        const auto loss = [](const Tensor& out, const Tensor& t) { return nn::gpt_loss(out, t); };
        for (int round = -1; round < rounds; ++round)  // round -1: warm-up
          for (size_t k = 0; k < pipes.size(); ++k) {
            for (Tensor& p : model.parameters()) p.set_grad(Tensor());
            g->barrier()->wait();
            const double start = bench::now_s();
            pipes[k]->step(ids, ids, loss);
            g->barrier()->wait();
            if (g->rank() == 0 && round >= 0) ms[k].push_back((bench::now_s() - start) * 1e3);
          }
      },
      kRanks);
  const double base = bench::median(ms[1]);
  std::printf(
      "\n2. GPT, 8 blocks, 128 wide, context 64, batch 16 (m = %d), float32, 4 stages "
      "on 4 thread ranks, 1 intra-op thread each; median of %d steps\n",
      kChunks, rounds);
  std::printf("%-12s %10s %12s\n", "schedule", "ms / step", "x 1F1B time");
  for (size_t k = 0; k < ms.size(); ++k)
    std::printf("%-12s %10.1f %12.2f\n", to_string(kSchedules[k]).c_str(), bench::median(ms[k]),
                bench::median(ms[k]) / base);
  return 0;
}
