// bench/elementwise_bench.cpp — GB/s (bytes read + written) of Tandem elementwise ops (add, mul by
// a scalar, relu, exp, [N,C]+[C] broadcast add) on 1M and 16M float32 elements at 1 and 2 threads,
// interleaved with references in the same process: a plain C++ loop (same compile flags) into a
// preallocated output, the same loop allocating its output per call as Tandem does, and memcpy.
// Build: cmake --build build-bench --target elementwise_bench   (with -DTANDEM_BUILD_BENCH=ON)
// Run:   ./build-bench/bench/elementwise_bench [--rounds N] [--quick] [--cpu-clock]
#include <tandem/tandem.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "bench_util.h"

namespace {

using RangeFn = std::function<void(int64_t, int64_t)>;

// Splits a loop over n threads like Tandem's pool does (n - 1 parked workers plus the caller), so
// the 2-thread references pay a wake-up per call rather than a thread start.
class Team {
 public:
  explicit Team(int n) : n_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~Team() {
    stop_ = true;
    gen_.fetch_add(1);
    gen_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void run(int64_t len, const RangeFn& fn) {
    if (n_ == 1) return fn(0, len);
    fn_ = &fn;
    len_ = len;
    pending_.store(n_ - 1);
    gen_.fetch_add(1);
    gen_.notify_all();
    fn(0, len / n_);
    for (int p; (p = pending_.load()) != 0;) pending_.wait(p);
  }

 private:
  void work(int i) {
    int seen = 0;
    for (;;) {
      gen_.wait(seen);
      seen = gen_.load();
      if (stop_) return;
      (*fn_)(len_ * i / n_, len_ * (i + 1) / n_);
      if (pending_.fetch_sub(1) == 1) pending_.notify_one();
    }
  }
  const int n_;
  std::vector<std::thread> workers_;
  std::atomic<int> gen_{0}, pending_{0};
  std::atomic<bool> stop_{false};
  const RangeFn* fn_ = nullptr;
  int64_t len_ = 0;
};

struct Op {
  const char* name;
  double bytes_per_elem;  // read + written per output element (the bias of [N,C]+[C] is ignored)
  std::function<tandem::Tensor()> tandem_fn;
  std::function<void(float* out, int64_t lo, int64_t hi)> loop_fn;
};

struct Row {
  const char* op;
  int64_t n;
  int threads;
  double tandem, loop, loop_alloc, copy, ratio_loop, max_err;
  bool ok;
};

constexpr int64_t kC = 512;  // channels of the broadcast add: a hidden layer's bias

Row measure(const Op& op, int64_t n, int threads, Team& team, const bench::Args& args) {
  std::vector<float> out(static_cast<size_t>(n));
  // memcpy moves as many bytes (read + written) as the op: copy bytes/2 from src to dst.
  const size_t copy_bytes = size_t(op.bytes_per_elem * double(n) / 2);
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes);
  volatile float sink = 0;

  auto run_tandem = [&] {
    const tandem::Tensor y = op.tandem_fn();
    sink = sink + y.data<float>()[n / 2];
  };
  const RangeFn loop_body = [&](int64_t lo, int64_t hi) { op.loop_fn(out.data(), lo, hi); };
  auto run_loop = [&] { team.run(n, loop_body); };
  // Tandem's CPU allocator is aligned_alloc/free per tensor; this isolates what that costs.
  auto run_loop_alloc = [&] {
    float* o = static_cast<float*>(std::aligned_alloc(64, size_t(n) * sizeof(float)));
    team.run(n, [&](int64_t lo, int64_t hi) { op.loop_fn(o, lo, hi); });
    sink = sink + o[n / 2];
    std::free(o);
  };
  const RangeFn copy_body = [&](int64_t lo, int64_t hi) {
    std::memcpy(dst.data() + lo, src.data() + lo, size_t(hi - lo));
  };
  auto run_copy = [&] { team.run(int64_t(copy_bytes), copy_body); };

  Row row{op.name, n, threads, 0, 0, 0, 0, 0, 0, true};
  run_loop();
  const tandem::Tensor y = op.tandem_fn();
  const float* py = y.data<float>();
  for (int64_t i = 0; i < n; ++i) {  // relative beyond 1: exp's results reach e^5
    const double ref = out[size_t(i)];
    row.max_err = std::max(row.max_err, std::fabs(py[i] - ref) / std::max(1.0, std::fabs(ref)));
  }
  row.ok = y.numel() == n && row.max_err <= 1e-5;  // Eigen's exp and std::exp differ by an ulp

  const double target_s = args.quick ? 0.005 : 0.02;
  const std::vector<std::function<void()>> variants = {run_tandem, run_loop, run_loop_alloc,
                                                       run_copy};
  std::vector<int> reps;
  for (const auto& v : variants) reps.push_back(bench::calibrate(v, target_s));
  std::vector<std::vector<double>> gbs(variants.size());
  std::vector<double> ratios;
  const double bytes = op.bytes_per_elem * double(n);
  for (int r = 0; r < args.rounds; ++r) {
    // Rotate the starting variant each round so none always runs right after another's traffic.
    std::vector<double> t(variants.size());
    for (size_t j = 0; j < variants.size(); ++j) {
      const size_t v = (j + size_t(r)) % variants.size();
      t[v] = bench::time_per_call(variants[v], reps[v]);
    }
    for (size_t v = 0; v < variants.size(); ++v) gbs[v].push_back(bytes / t[v] * 1e-9);
    ratios.push_back(t[1] / t[0]);
  }
  row.tandem = bench::median(gbs[0]);
  row.loop = bench::median(gbs[1]);
  row.loop_alloc = bench::median(gbs[2]);
  row.copy = bench::median(gbs[3]);
  row.ratio_loop = bench::median(ratios);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 7);
  bench::report_load();
  std::printf("rounds: %d%s; GB/s count bytes read + written; memcpy moves the same bytes\n",
              args.rounds, args.quick ? " (quick)" : "");
  std::vector<Row> rows;
  for (const int threads : {1, 2}) {
    tandem::set_num_threads(threads);
    Team team(threads);
    for (const int64_t n : {int64_t(1) << 20, int64_t(1) << 24}) {
      const tandem::Tensor a = tandem::randn({n}), b = tandem::randn({n});
      const tandem::Tensor a2 = a.view({n / kC, kC}), bias = tandem::randn({kC});
      const float* pa = a.data<float>();
      const float* pb = b.data<float>();
      const float* pbias = bias.data<float>();
      const std::vector<Op> ops = {
          {"add", 12, [&] { return a + b; },
           [&](float* o, int64_t lo, int64_t hi) {
             for (int64_t i = lo; i < hi; ++i) o[i] = pa[i] + pb[i];
           }},
          {"mul_scalar", 8, [&] { return a * 1.5; },
           [&](float* o, int64_t lo, int64_t hi) {
             for (int64_t i = lo; i < hi; ++i) o[i] = pa[i] * 1.5f;
           }},
          {"relu", 8, [&] { return tandem::relu(a); },
           [&](float* o, int64_t lo, int64_t hi) {
             for (int64_t i = lo; i < hi; ++i) o[i] = pa[i] > 0.0f ? pa[i] : 0.0f;
           }},
          {"exp", 8, [&] { return tandem::exp(a); },
           [&](float* o, int64_t lo, int64_t hi) {
             for (int64_t i = lo; i < hi; ++i) o[i] = std::exp(pa[i]);
           }},
          {"bias_add[N,512]", 8, [&] { return a2 + bias; },
           [&](float* o, int64_t lo, int64_t hi) {
             // Row by row: a `% kC` per element would keep the compiler from vectorising.
             for (int64_t i = lo; i < hi;) {
               const int64_t c0 = i % kC, len = std::min(kC - c0, hi - i);
               for (int64_t j = 0; j < len; ++j) o[i + j] = pa[i + j] + pbias[c0 + j];
               i += len;
             }
           }},
      };
      for (const Op& op : ops) rows.push_back(measure(op, n, threads, team, args));
    }
  }

  std::printf("\n%-16s %9s %7s %9s %9s %11s %9s %11s %14s %9s\n", "op", "elements", "threads",
              "Tandem", "loop", "loop+alloc", "memcpy", "Tandem/loop", "Tandem/memcpy", "max err");
  bool all_ok = true;
  for (const Row& r : rows) {
    std::printf("%-16s %8lldM %7d %9.1f %9.1f %11.1f %9.1f %11.2f %14.2f %9.1e%s\n", r.op,
                (long long)(r.n >> 20), r.threads, r.tandem, r.loop, r.loop_alloc, r.copy,
                r.ratio_loop, r.tandem / r.copy, r.max_err, r.ok ? "" : "  RESULTS DISAGREE");
    all_ok = all_ok && r.ok;
  }
  if (!all_ok) {
    std::printf("FAILED: a Tandem op does not match the plain loop\n");
    return 1;
  }
  return 0;
}
