// tools/plan/calibrate.cpp — kernels, the framework's cost, the cores' sharing and the links,
// measured on this host (calibrate.h).
#include <tandem/core/check.h>
#include <tandem/core/thread_pool.h>
#include <tandem/parallel/process_group.h>
#include <tandem/parallel/spawn.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../train/gpt_rank.h"
#include "../train/step.h"
#include "../train/update.h"
#include "calibrate.h"
#include "rehearsal.h"

namespace tandem::tools {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string key(int threads, const std::string& signature) {
  return std::to_string(threads) + "\t" + signature;
}

// The options of one CPU device: the model, batch and step of `o`, no layout.
TrainOptions one_device(TrainOptions o) {
  o.tp = o.pp = o.cp = o.ep = 1, o.dp = 0, o.zero = 0;
  o.ddp = false, o.sequence_parallel = false;
  return o;
}

// Seconds of one real step of `o` on the CPU: the median of eleven after three.
double measured_step(const TrainOptions& o, int64_t characters) {
  const Placement placement{.mode = Parallelism::None, .device = Device::cpu()};
  GptRank r =
      build_gpt_rank(o, characters, table_rows(o.gpt, characters, o), placement, nullptr, nullptr);
  r.setup.model->train();
  const Tensor x = full({o.batch_size, o.gpt.block_size}, 1, {.dtype = kInt64});
  std::vector<double> times;
  for (int step = 0; step < 14; ++step) {
    const Clock::time_point t0 = Clock::now();
    r.optimizer->zero_grad();
    train_step(r.setup, x, x);
    step_optimizer(r.setup, *r.optimizer);
    if (step >= 3) times.push_back(since(t0));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The replays of `trace`'s kernels, in order, on the CPU.
std::vector<meta_calls::Prepared> prepare(const CallTable& calls, const RankTrace& trace) {
  std::vector<meta_calls::Prepared> runs;
  for (const TraceItem& item : trace.items)
    if (item.kind == TraceItem::Kind::Kernel)
      runs.push_back(calls.replay(item.index)(Device::cpu()));
  return runs;
}

// Seconds for k threads to each run `trace`'s kernels three times on one intra-op thread, from
// when all are ready to when the last is done (a thread's best pass would flatter a share of
// the cores that the others take turns at).
double run_together(const CallTable& calls, const RankTrace& trace, int k) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (int c = 0; c < k; ++c)
    workers.emplace_back([&] {
      IntraOpThreadsGuard one(1);
      const std::vector<meta_calls::Prepared> runs = prepare(calls, trace);
      for (const meta_calls::Prepared& run : runs) run();  // warm
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      for (int pass = 0; pass < 3; ++pass)
        for (const meta_calls::Prepared& run : runs) run();
    });
  while (ready.load() < k) std::this_thread::yield();
  const Clock::time_point t0 = Clock::now();
  go.store(true);
  for (std::thread& t : workers) t.join();
  return since(t0) / 3;
}

// seconds = latency + bytes / bandwidth through measured (bytes, seconds), by size: the bandwidth
// from the two largest (the slope where it dominates), the latency from the smallest.
LinkFit fit(const std::vector<std::pair<double, double>>& points) {
  const auto& [b0, t0] = points.front();
  const auto& [b1, t1] = points[points.size() - 2];
  const auto& [b2, t2] = points.back();
  const double bandwidth = t2 > t1 ? (b2 - b1) / (t2 - t1) : b2 / t2;
  return {.latency = std::max(0.0, t0 - b0 / bandwidth), .bandwidth = bandwidth};
}

}  // namespace

int rank_threads(int world) {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return world <= 1 ? get_num_threads() : std::max(1, cores / world);
}

std::vector<double> call_seconds(const CallTable& calls, int threads, const HostProfile& profile) {
  auto fit = profile.compute.find(threads);
  TD_CHECK_VALUE(fit != profile.compute.end(), "plan: the profile was not calibrated for ", threads,
                 " intra-op thread(s) per rank (this many ranks on this host); "
                 "calibrate with this --nproc (tandem plan ... --calibrate FILE)");
  std::vector<double> out(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const meta_calls::Call& c = calls.call(int(i));
    auto it = profile.kernels.find(key(threads, c.signature));
    TD_CHECK_VALUE(it != profile.kernels.end(), "plan: the profile has no time for '", c.signature,
                   "' at ", threads,
                   " thread(s); calibrate with this layout's flags (tandem plan ... "
                   "--calibrate FILE)");
    out[i] = it->second * fit->second.scale + fit->second.per_call;
  }
  return out;
}

void time_calls(const CallTable& calls, int threads, HostProfile& profile) {
  IntraOpThreadsGuard cap(threads);
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string k = key(threads, calls.call(int(i)).signature);
    if (profile.kernels.count(k) == 0)
      profile.kernels[k] = meta_calls::time_replay(calls.replay(int(i)), Device::cpu());
  }
}

void calibrate_compute(const TrainOptions& options, int64_t characters, int ranks,
                       HostProfile& profile) {
  const int threads = rank_threads(ranks);
  profile.machine = this_machine();
  const int before = get_num_threads();
  set_num_threads(threads);  // the ranks' threads, for the step and its kernels alike
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{before};
  const TrainOptions o = one_device(options);
  TrainOptions quarter = o;  // a micro-batch's size, as a pipeline's or DDP's ranks see
  quarter.batch_size = std::max<int64_t>(1, o.batch_size / 4);
  auto calls = std::make_shared<CallTable>();
  const RankTrace trace = rehearse_gpt(o, characters, 1, calls).front().trace;
  const RankTrace small = rehearse_gpt(quarter, characters, 1, calls).front().trace;
  time_calls(*calls, threads, profile);
  // A real step of the batch and one of a quarter of it against their kernels alone: step =
  // scale · kernels + per_call · calls, two equations for the two unknowns.
  const auto alone = [&](const RankTrace& t) {
    std::pair<double, double> kernels_calls{0, 0};
    for (const TraceItem& item : t.items)
      if (item.kind == TraceItem::Kind::Kernel) {
        kernels_calls.first += profile.kernels.at(key(threads, calls->call(item.index).signature));
        kernels_calls.second += 1;
      }
    return kernels_calls;
  };
  const auto [k1, n1] = alone(trace);
  const auto [k2, n2] = alone(small);
  const double t1 = measured_step(o, characters), t2 = measured_step(quarter, characters);
  const double det = k1 * n2 - k2 * n1;
  ComputeFit fit;
  fit.scale = det != 0 ? (t1 * n2 - t2 * n1) / det : 1;
  fit.per_call = det != 0 ? (k1 * t2 - k2 * t1) / det : 0;
  if (!(fit.per_call >= 0 && fit.scale >= 0.5 && fit.scale <= 4)) {  // noise: one equation
    fit.scale = std::clamp(t1 / k1, 0.5, 4.0);
    fit.per_call = std::max(0.0, (t1 - fit.scale * k1) / n1);
  }
  profile.compute[threads] = fit;
  // The cores' sharing: the step's kernels on one thread, then on 2 .. `ranks` threads at once.
  const double one = run_together(*calls, trace, 1);
  profile.throughput = {{1, 1.0}};
  for (int k = 2; k <= ranks; ++k)
    profile.throughput[k] = std::clamp(k * one / run_together(*calls, trace, k), 0.5, double(k));
}

void measure_links(HostProfile& profile) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("tandem-plan-links-" + std::to_string(getpid()) + ".txt"))
                              .string();
  parallel::spawn(
      [&out](int rank) {
        parallel::init_process_group();
        parallel::Communicator& group = parallel::default_group();
        const Device device = parallel::local_device();
        std::string lines;
        for (int64_t numel :
             {int64_t(1) << 10, int64_t(1) << 14, int64_t(1) << 17, int64_t(1) << 20}) {
          Tensor t = full({numel}, 1.0, {.device = device});
          auto time = [&](auto&& body) {  // the median call: a VM's pauses are not the link's
            for (int i = 0; i < 5; ++i) body();
            std::vector<double> each;
            for (int i = 0; i < 31; ++i) {
              const Clock::time_point t0 = Clock::now();
              body();
              each.push_back(since(t0));
            }
            std::nth_element(each.begin(), each.begin() + 15, each.end());
            return each[15];
          };
          const double reduce = time([&] { group.all_reduce(t)->wait(); });
          const double round_trip = time([&] {
            if (rank == 0) group.send(t, 1)->wait(), group.recv(t, 1)->wait();
            if (rank == 1) group.recv(t, 0)->wait(), group.send(t, 0)->wait();
          });
          lines += str(numel * 4, " ", reduce, " ", round_trip / 2, "\n");
        }
        if (rank == 0) std::ofstream(out) << lines;
        parallel::destroy_process_group();
      },
      2, {.prefix_output = false});
  std::ifstream in(out);
  std::vector<std::pair<double, double>> reduce, message;
  double bytes = 0, r = 0, m = 0;
  while (in >> bytes >> r >> m) reduce.push_back({bytes, r}), message.push_back({bytes, m});
  std::filesystem::remove(out);
  TD_CHECK_VALUE(reduce.size() == 4, "plan --calibrate: the link measurement left no numbers");
  profile.notes.clear();
  for (size_t i = 0; i < reduce.size(); ++i)
    profile.notes.push_back(str("2 ranks, ", reduce[i].first, " B: all_reduce ",
                                reduce[i].second * 1e6, " us, send/recv ", message[i].second * 1e6,
                                " us (median of 31)"));
  profile.collective = fit(reduce);  // all_reduce on 2 ranks puts its tensor's bytes on the wire
  profile.message = fit(message);
}

StepTime TimeModel::predict(const std::vector<RankTrace>& traces) const {
  const int world = int(traces.size());
  return simulate_step(traces, call_seconds(*calls, rank_threads(world), profile), profile);
}

}  // namespace tandem::tools
