// bench/bf16_gemm_bench.cpp — the candidates for 16-bit matrix products on the CPU (issue 16), in
// one run: C = A·B for 1024³ on 1 and 2 threads, against OpenBLAS sgemm on the same threads:
//   sgemm:                float32 in, float32 out (the reference);
//   convert + sgemm:      bfloat16 in, widened to float32 (Tandem's conversion), sgemm, float32
//   out; oneDNN bf16 -> f32:   oneDNN's matmul primitive, bfloat16 in, float32 accumulate and out;
//   oneDNN bf16 -> bf16:  the same, rounded to bfloat16 on the way out.
// oneDNN (Debian's libdnnl 2.6) picks its kernel from the CPU: AMX on Sapphire Rapids,
// AVX512-BF16 on Zen 4; the line says which ("impl"). Numbers are best-of-N per call.
//   build-bench/bench/bf16_gemm_bench [--rounds N] [--quick]
#include <tandem/core/kernels/kernels.h>
#include <tandem/tandem.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cblas.h>
#include <algorithm>
#include <tuple>
#include <vector>

#include "bench_util.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" void omp_set_num_threads(int num_threads);  // Debian's oneDNN runs on OpenMP

namespace {

constexpr int64_t kN = 1024;

double gflops(double seconds) { return 2.0 * kN * kN * kN / seconds / 1e9; }

template <typename F>
double best_of(int rounds, F&& f) {
  f();  // warm-up (oneDNN generates its kernel on the first call)
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) best = std::min(best, bench::time_per_call(f, 1));
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 10);
  bench::report_load();
  using namespace tandem;
  const Tensor a32 = randn({kN, kN}), b32 = randn({kN, kN});
  const Tensor a16 = a32.to(kBFloat16), b16 = b32.to(kBFloat16);
  std::vector<float> c(size_t(kN * kN));
  std::vector<float> wa(size_t(kN * kN)), wb(size_t(kN * kN));

  using namespace dnnl;
  const engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const memory::dims dims{kN, kN};
  const memory::desc src(dims, memory::data_type::bf16, memory::format_tag::ab);
  memory a_mem(src, eng, const_cast<void*>(a16.data_ptr()));
  memory b_mem(src, eng, const_cast<void*>(b16.data_ptr()));

  std::printf("%-22s %8s %12s %10s %10s  %s\n", "1024^3", "threads", "ms / call", "GFLOP/s",
              "vs sgemm", "oneDNN impl");
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);  // oneDNN's parallel regions on this thread
    const int rounds = args.quick ? 2 : args.rounds;
    const double sgemm = best_of(rounds, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(kN), int(kN), int(kN), 1.0f,
                  a32.data<float>(), int(kN), b32.data<float>(), int(kN), 0.0f, c.data(), int(kN));
    });
    const double widened = best_of(rounds, [&] {
      const auto* pa = a16.data<BFloat16>();
      const auto* pb = b16.data<BFloat16>();
      for (size_t i = 0; i < wa.size(); ++i) wa[i] = float(pa[i]), wb[i] = float(pb[i]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(kN), int(kN), int(kN), 1.0f,
                  wa.data(), int(kN), wb.data(), int(kN), 0.0f, c.data(), int(kN));
    });
    std::printf("%-22s %8d %12.2f %10.0f %9.2fx\n", "sgemm", threads, sgemm * 1e3, gflops(sgemm),
                1.0);
    std::printf("%-22s %8d %12.2f %10.0f %9.2fx\n", "convert + sgemm", threads, widened * 1e3,
                gflops(widened), sgemm / widened);
    for (const auto out : {memory::data_type::f32, memory::data_type::bf16}) {
      const memory::desc dst(dims, out, memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, src, dst), eng);
      const dnnl::matmul mm(pd);
      memory c_mem(dst, eng);
      const double t = best_of(rounds, [&] {
        mm.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
        strm.wait();
      });
      std::printf("%-22s %8d %12.2f %10.0f %9.2fx  %s\n",
                  out == memory::data_type::f32 ? "oneDNN bf16 -> f32" : "oneDNN bf16 -> bf16",
                  threads, t * 1e3, gflops(t), sgemm / t, pd.impl_info_str());
    }
  }
  // Tandem's own matmul in bfloat16 (kernels/cpu/gemm_onednn.cpp: oneDNN where the CPU has the
  // instructions, split over the intra-op threads), in the three layouts a linear layer uses:
  // forward x·Wᵀ, input gradient dy·W, weight gradient dyᵀ·x.
  std::printf("\nTandem matmul (bfloat16 path: %s)\n", cpu_gemm_path(kBFloat16).c_str());
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const int rounds = args.quick ? 2 : args.rounds;
    for (const auto& [label, ta, tb] :
         {std::tuple{"a.b", false, false}, std::tuple{"a.bT", false, true},
          std::tuple{"aT.b", true, false}}) {
      auto op = [&](const Tensor& x, const Tensor& y) {
        return (ta ? x.t() : x).matmul(tb ? y.t() : y);
      };
      const double f32 = best_of(rounds, [&] { op(a32, b32); });
      const double bf16 = best_of(rounds, [&] { op(a16, b16); });
      std::printf("%-22s %8d %12.2f %10.0f %9.2fx  (float32 %.2f ms)\n", label, threads, bf16 * 1e3,
                  gflops(bf16), f32 / bf16, f32 * 1e3);
    }
  }
  std::printf("bar (issue 16): a bf16 GEMM at least 2x sgemm on the same threads\n");
  return 0;
}
