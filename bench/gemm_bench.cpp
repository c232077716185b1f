// bench/gemm_bench.cpp — float32 GEMM GFLOP/s of tandem::matmul (public API, CPU) against OpenBLAS
// cblas_sgemm on the same inputs in the same process, at 1 and 2 threads, interleaved A/B/B/A
// over several rounds; prints medians and the median per-round ratio Tandem/OpenBLAS.
// Build: cmake --build build-bench --target gemm_bench   (configured with -DTANDEM_BUILD_BENCH=ON)
// Run:   ./build-bench/bench/gemm_bench [--rounds N] [--quick] [--cpu-clock]
#include <cblas.h>

#include <tandem/tandem.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "bench_util.h"

namespace {

struct GemmShape {
  int64_t m, k, n;
};

struct Row {
  GemmShape s;
  int threads;
  double tandem_gflops, blas_gflops, ratio, ratio_lo, ratio_hi, max_diff;
  bool ok;
};

// c = a·b, all row-major and contiguous: what tandem::matmul computes for 2-D operands.
void blas_gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f, a,
              int(s.k), b, int(s.n), 0.0f, c, int(s.n));
}

// Both sides call the same OpenBLAS, so agreeing with each other would not catch garbage inputs
// or a wrong layout on both; a few entries are also checked against a double-precision dot.
bool verify(const GemmShape& s, const float* a, const float* b, const float* tandem_c,
            const float* blas_c, double* max_diff) {
  *max_diff = 0;
  for (int64_t i = 0; i < s.m * s.n; ++i)
    *max_diff = std::max(*max_diff, double(std::fabs(tandem_c[i] - blas_c[i])));
  // Entries of a·b with randn inputs have size ~sqrt(k); float32 sums are good to ~1e-6 of that.
  const double tol = 1e-4 * std::sqrt(double(s.k));
  bool ok = *max_diff <= tol;
  for (int probe = 0; probe < 16; ++probe) {
    const int64_t i = (probe * 7919) % s.m, j = (probe * 104729) % s.n;
    double dot = 0;
    for (int64_t p = 0; p < s.k; ++p) dot += double(a[i * s.k + p]) * double(b[p * s.n + j]);
    if (std::fabs(dot - double(tandem_c[i * s.n + j])) > tol) ok = false;
  }
  return ok;
}

Row measure(const GemmShape& s, int threads, const bench::Args& args) {
  const tandem::Tensor a = tandem::randn({s.m, s.k});
  const tandem::Tensor b = tandem::randn({s.k, s.n});
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  std::vector<float> c_ref(size_t(s.m * s.n));
  volatile float sink = 0;  // keeps each Tandem result observably used

  // A user's call allocates its output every time; that cost is part of what Tandem delivers.
  auto run_tandem = [&] {
    const tandem::Tensor c = tandem::matmul(a, b);
    sink = sink + c.data<float>()[0];
  };
  auto run_blas = [&] { blas_gemm(s, pa, pb, c_ref.data()); };
  // Tandem keeps OpenBLAS at one thread and splits products over its own pool; the reference is
  // OpenBLAS threading itself, so its thread count is raised around its own timings only.
  auto time_blas = [&](int reps_) {
    openblas_set_num_threads(threads);
    const double t = bench::time_per_call(run_blas, reps_);
    openblas_set_num_threads(1);
    return t;
  };

  Row row{s, threads, 0, 0, 0, 0, 0, 0, false};
  const tandem::Tensor c = tandem::matmul(a, b);
  time_blas(1);
  row.ok = verify(s, pa, pb, c.data<float>(), c_ref.data(), &row.max_diff);

  const double target_s = args.quick ? 0.01 : 0.05;
  // One rep count for both sides so a sample covers the same work; OpenBLAS's is the yardstick.
  openblas_set_num_threads(threads);
  const int reps = std::max(bench::calibrate(run_blas, target_s), 1);
  openblas_set_num_threads(1);
  bench::calibrate(run_tandem, target_s);  // warm-up only

  std::vector<double> t_tandem, t_blas, ratios;
  for (int r = 0; r < args.rounds; ++r) {
    // A B then B A on alternate rounds, so slow drift (clock, the other core's load) cancels.
    double tt, tb;
    if (r % 2 == 0) {
      tt = bench::time_per_call(run_tandem, reps);
      tb = time_blas(reps);
    } else {
      tb = time_blas(reps);
      tt = bench::time_per_call(run_tandem, reps);
    }
    t_tandem.push_back(tt);
    t_blas.push_back(tb);
    ratios.push_back(tb / tt);  // throughput ratio Tandem/OpenBLAS of this round
  }
  const double flop = 2.0 * double(s.m) * double(s.k) * double(s.n);
  row.tandem_gflops = flop / bench::median(t_tandem) * 1e-9;
  row.blas_gflops = flop / bench::median(t_blas) * 1e-9;
  row.ratio = bench::median(ratios);
  row.ratio_lo = *std::min_element(ratios.begin(), ratios.end());
  row.ratio_hi = *std::max_element(ratios.begin(), ratios.end());
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 11);
  bench::report_load();
  std::printf("rounds: %d%s; ratio = median over rounds of (Tandem GFLOP/s / OpenBLAS GFLOP/s)\n",
              args.rounds, args.quick ? " (quick)" : "");
  const std::vector<GemmShape> shapes = {{64, 784, 512}, {256, 784, 512}, {1024, 1024, 1024}};

  std::vector<Row> rows;
  for (const int threads : {1, 2}) {
    tandem::set_num_threads(threads);
    if (tandem::get_num_threads() != threads)
      std::printf("WARNING: asked for %d threads, Tandem has %d\n", threads,
                  tandem::get_num_threads());
    for (const GemmShape& s : shapes) {
      rows.push_back(measure(s, threads, args));
      std::fflush(stdout);
    }
  }

  std::printf("\n%-22s %7s %14s %16s %15s %15s %10s\n", "shape (MxK * KxN)", "threads",
              "Tandem GFLOP/s", "OpenBLAS GFLOP/s", "Tandem/OpenBLAS", "(min..max)", "max|diff|");
  bool all_ok = true;
  for (const Row& r : rows) {
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lld * %lldx%lld", (long long)r.s.m, (long long)r.s.k,
                  (long long)r.s.k, (long long)r.s.n);
    char range[32];
    std::snprintf(range, sizeof range, "%.2f..%.2f", r.ratio_lo, r.ratio_hi);
    std::printf("%-22s %7d %14.1f %16.1f %15.3f %15s %10.2e%s\n", shape, r.threads, r.tandem_gflops,
                r.blas_gflops, r.ratio, range, r.max_diff, r.ok ? "" : "  RESULTS DISAGREE");
    all_ok = all_ok && r.ok;
  }
  if (!all_ok) {
    std::printf("FAILED: Tandem's matmul does not match the reference\n");
    return 1;
  }
  return 0;
}
