// bench/pipeline_bench.cpp — what pipelining buys, in one run: 8 × (Linear(2048, 2048) + ReLU),
// batch 512, float32, split 4 + 4 layers over cpu:0 and cpu:1, one intra-op thread per stage.
//
// Time: the median of single SGD steps, interleaved round by round:
//   plain model parallelism (parallel::run_stages: stage 0, then stage 1, the whole batch at once,
//   one thread) against parallel::Pipeline with GPipe for M = 1, 2, 4, 8, 16 micro-batches,
//   1F1B for M = 8, and GPipe for M = 8 with its weight gradients computed in each backward
//   instead of deferred to one W action per stage ("gpipe-BW"). With K = 2 stages of equal work,
//   the bubble leaves (K−1)/(M+K−1) of each stage's time idle, so the best speed-up over plain is
//   K·M/(M+K−1) (1.78 for M = 8).
// Memory: each stage's peak activation memory in the step (PipelineResult::peak_activation_bytes:
//   its device's memory above the step's start, between actions), GPipe against 1F1B at M = 8.
// --trace FILE writes a Chrome trace of one GPipe and one 1F1B step (M = 8): open it in Perfetto,
// each stage is a track of F<i>/B<i> spans and the gaps are the bubble.
//   build-bench/bench/pipeline_bench [--rounds N] [--quick] [--trace FILE]
#include <tandem/tandem.h>

#include <string>

#include "bench_util.h"

using namespace tandem;

namespace {

constexpr int kLayers = 8;
constexpr int64_t kWidth = 2048, kBatch = 512;

double mib(int64_t bytes) { return double(bytes) / (1 << 20); }

struct Mode {
  std::string name;
  int64_t chunks;  // 0: plain model parallelism
  parallel::PipelineSchedule schedule;
  parallel::PipelineWeightGrads weight_grads;
  std::unique_ptr<parallel::Pipeline> pipe;
  std::vector<double> ms;
  std::vector<int64_t> peak;
  std::vector<double> idle;  // per step: the stages' mean share of the step spent waiting
  std::vector<double> work;  // per step: both stages' computing time, ms
};

}  // namespace

int main(int argc, char** argv) {
  std::string trace_path;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--trace" && i + 1 < argc)
      trace_path = argv[++i];
    else
      rest.push_back(argv[i]);
  }
  const bench::Args args = bench::parse_args(int(rest.size()), rest.data(), 5);
  bench::report_load();
  set_num_threads(2);  // a pipeline gives each of its 2 stages 2 / 2 = 1 intra-op thread

  manual_seed(0);
  nn::Sequential model;
  for (int i = 0; i < kLayers; ++i) {
    model.push_back(nn::Linear(kWidth, kWidth));
    model.push_back(nn::ReLU());
  }
  const std::vector<Device> devices{Device::cpu(0), Device::cpu(1)};
  std::vector<parallel::Stage> stages = parallel::split(model, devices, {8, 8});
  {
    NoGradGuard no_grad;  // gradients allocated once and zeroed between steps
    for (Tensor& p : model.parameters()) p.set_grad(zeros_like(p));
  }
  optim::SGD opt(model.parameters(), {.lr = 1e-6});
  const Tensor x = randn({kBatch, kWidth});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < kBatch; ++i) labels.push_back((i * 37) % kWidth);
  const Tensor y = from_vector(labels, {kBatch});
  auto loss_fn = [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); };

  using S = parallel::PipelineSchedule;
  using W = parallel::PipelineWeightGrads;
  std::vector<Mode> modes;
  modes.push_back({"plain", 0, S::GPipe, W::Auto, nullptr, {}, {}});
  for (int64_t m : {1, 2, 4, 8, 16})
    modes.push_back({"gpipe", m, S::GPipe, W::Auto, nullptr, {}, {}});
  modes.push_back({"1f1b", 8, S::OneFOneB, W::Auto, nullptr, {}, {}});
  modes.push_back({"gpipe-BW", 8, S::GPipe, W::WithBackward, nullptr, {}, {}});
  for (Mode& mode : modes)
    if (mode.chunks > 0)  // the pipelines share the stages' modules: the same parameters
      mode.pipe = std::make_unique<parallel::Pipeline>(
          stages,
          parallel::PipelineOptions{
              .chunks = mode.chunks, .schedule = mode.schedule, .weight_grads = mode.weight_grads});

  auto step = [&](Mode& mode) {
    {
      NoGradGuard no_grad;
      for (Tensor& p : model.parameters()) p.grad().zero_();
    }
    if (mode.pipe) {
      const parallel::PipelineResult r = mode.pipe->step(x, y, loss_fn);
      mode.peak = r.peak_activation_bytes;
      mode.work.push_back((r.busy_seconds[0] + r.busy_seconds[1]) * 1e3);
      mode.idle.push_back(1 - (r.busy_seconds[0] + r.busy_seconds[1]) / (2 * r.seconds));
    } else {
      IntraOpThreadsGuard one(1);  // one thread, as each pipeline stage has
      loss_fn(parallel::run_stages(stages, x), y.to(devices.back())).backward();
    }
    opt.step();
  };
  for (Mode& mode : modes) step(mode);  // warm-up
  const int rounds = args.quick ? 1 : args.rounds;
  for (int round = 0; round < rounds; ++round)
    for (Mode& mode : modes) mode.ms.push_back(bench::time_per_call([&] { step(mode); }, 1) * 1e3);

  std::printf(
      "%d x (Linear(%ld, %ld) + ReLU), batch %ld, float32, SGD, stages 4 + 4 layers on "
      "cpu:0, cpu:1; one intra-op thread per stage; median of %d steps\n",
      kLayers, long(kWidth), long(kWidth), long(kBatch), rounds);
  std::printf("%-8s %4s %10s %10s %8s %8s %8s %8s %6s %10s %14s\n", "mode", "M", "ms / step",
              "speed-up", "bound", "of bound", "bubble", "idle", "work", "bound/work",
              "peak act MiB");
  const double plain = bench::median(modes[0].ms);
  double gpipe8 = 0, bound8 = 0;
  for (const Mode& mode : modes) {
    const double ms = bench::median(mode.ms), speedup = plain / ms;
    if (mode.chunks == 0) {
      std::printf("%-8s %4s %10.1f %9.2fx %8s %8s %8s %8s %6s %10s %14s\n", "plain", "-", ms, 1.0,
                  "1.00x", "", "50%", "50%", "1.00", "1.00x", "");
      continue;
    }
    const double m = double(mode.chunks), bound = 2 * m / (m + 1);
    const std::string peak = str(int(mib(mode.peak[0]) + 0.5), " / ", int(mib(mode.peak[1]) + 0.5));
    const double work = bench::median(mode.work) / plain;
    std::printf("%-8s %4ld %10.1f %9.2fx %7.2fx %7.0f%% %7.0f%% %7.0f%% %6.2f %9.2fx %14s\n",
                mode.name.c_str(), long(mode.chunks), ms, speedup, bound, 100 * speedup / bound,
                100 / (m + 1), 100 * bench::median(mode.idle), work, bound / work, peak.c_str());
    if (mode.name == "gpipe" && mode.chunks == 8) gpipe8 = speedup, bound8 = bound;
  }
  const Mode& g8 = modes[4];
  const Mode& f8 = modes[6];
  std::printf(
      "bubble: (K-1)/(M+K-1), each stage's idle share of the step in theory; idle: measured "
      "(the stages' mean share\n  of the step spent waiting for a neighbour, from "
      "PipelineResult::busy_seconds)\nwork: both stages' computing time over plain's step: "
      "what smaller products cost (1.00: as efficient as the whole batch);\n  bound/work: "
      "the speed-up the bubble allows at that cost\n"
      "gpipe and 1f1b: PipelineWeightGrads::Auto (GPipe defers its weight gradients to one W per "
      "stage after its last\n  backward, whose last stage's W overlaps the first stage's last "
      "B: M = 1 can pass 2M/(M+1)); gpipe-BW: GPipe\n  with the weight gradients inside each "
      "backward (WithBackward)\n"
      "bars (M = 8): GPipe at least 1.5x plain (%.2fx) and within 15%% of %.2fx (%.0f%%);\n"
      "1F1B's peak activation memory at most half of GPipe's per stage (%.2f, %.2f)\n",
      gpipe8, bound8, 100 * gpipe8 / bound8, double(f8.peak[0]) / double(g8.peak[0]),
      double(f8.peak[1]) / double(g8.peak[1]));

  if (!trace_path.empty()) {
    trace::enable();
    step(modes[4]);
    step(modes[6]);
    trace::enable(false);
    std::printf("trace of one GPipe and one 1F1B step (M = 8): %s (%zu events)\n",
                trace_path.c_str(), trace::write_chrome_trace(trace_path));
  }
  return 0;
}
