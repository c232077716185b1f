// core/kernels/cpu/gemm_16bit.cpp — matrix products of bfloat16 and float16 tensors on the CPU.
// oneDNN's matmul primitive (Debian's libdnnl 2.6, the library LibTorch uses) multiplies 16-bit
// inputs with float32 accumulation on the instructions made for it: AMX tiles on Sapphire Rapids,
// AVX512-BF16 on Zen 4. It picks its kernel from the CPU at run time, so one binary serves every
// host. Where it only has a kernel that emulates the format (a CPU without those instructions, or
// float16 on Zen 4), converting to float32 and calling sgemm is faster (bench/bf16_gemm_bench), so
// that is what runs there. cpu_gemm_path() says which, for `tandem devices`.
//
// Threads: as for sgemm (gemm_util.h), the pool owns them. oneDNN runs on OpenMP here, whose
// workers spin after each call and would fight the pool on 2 cores; so every call is made with one
// OpenMP thread, and a large product is split into row blocks over the pool.
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/onednn.h>
#include <tandem/core/kernels/widen.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace tandem::cpu {
namespace {

using dnnl::memory;

// One operand as oneDNN sees it: element offset, dims and strides (batch, rows, cols).
struct Operand {
  int64_t offset;
  memory::dims dims, strides;
};

struct Primitive {
  std::optional<dnnl::matmul> matmul;  // empty: only oneDNN's reference kernel, or none
  std::string impl;
};

// The primitive for one set of operand layouts, created once per thread and kept (a training
// step multiplies the same few shapes over and over).
const Primitive& primitive(DType t, const Operand& a, const Operand& b, const Operand& c) {
  thread_local std::map<std::vector<int64_t>, Primitive> cache;
  std::vector<int64_t> key{int64_t(t)};
  for (const Operand* o : {&a, &b, &c}) {
    key.insert(key.end(), o->dims.begin(), o->dims.end());
    key.insert(key.end(), o->strides.begin(), o->strides.end());
  }
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() > 512) cache.clear();  // shapes that keep changing: do not grow without bound
  Primitive p;
  try {
    const memory::data_type dt = onednn_type(t);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc(a.dims, dt, a.strides), memory::desc(b.dims, dt, b.strides),
                           memory::desc(c.dims, dt, c.strides)),
        onednn_engine());
    p.impl = pd.impl_info_str();
    // Its kernels ("brg:avx512_core_bf16", "gemm:jit", "brg:avx512_core_amx") run near the
    // instructions' peak for every layout we pass; "ref" is a plain loop.
    if (is_optimized(p.impl)) p.matmul.emplace(pd);
  } catch (const dnnl::error&) {  // unimplemented for these operands: sgemm it is
    p.impl = "none";
  }
  return cache.emplace(std::move(key), std::move(p)).first->second;
}

// c = op(a)·op(b) by oneDNN for rows [lo, hi) of c; false when there is no hardware kernel.
bool onednn_rows(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t lo,
                 int64_t hi) {
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1);
  const int64_t k = ta ? a.size(-2) : a.size(-1), rows = hi - lo;
  // A 2-D operand shared by every batch entry is a batch of one, which oneDNN broadcasts.
  const int64_t ba = a.dim() == 3 ? batch : 1, bb = b.dim() == 3 ? batch : 1;
  const Operand oa{ta ? lo : lo * k, {ba, rows, k}, {m * k, ta ? 1 : k, ta ? m : 1}};
  const Operand ob{0, {bb, k, n}, {k * n, tb ? 1 : n, tb ? k : 1}};
  const Operand oc{lo * n, {batch, rows, n}, {m * n, n, 1}};
  one_openmp_thread();
  const Primitive& p = primitive(c.dtype(), oa, ob, oc);
  if (!p.matmul) return false;
  auto mem = [&](const Operand& o, const Tensor& t) {
    return onednn_memory(memory::desc(o.dims, onednn_type(c.dtype()), o.strides), t, o.offset);
  };
  p.matmul->execute(
      onednn_stream(),
      {{DNNL_ARG_SRC, mem(oa, a)}, {DNNL_ARG_WEIGHTS, mem(ob, b)}, {DNNL_ARG_DST, mem(oc, c)}});
  return true;
}

}  // namespace

// c = op(a)·op(b) in a 16-bit dtype (shapes as gemm() in matmul.cpp), accumulated in float32.
void gemm_16bit(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  const int64_t m = c.size(-2), n = c.size(-1), k = trans_a ? a.size(-2) : a.size(-1);
  if (c.numel() == 0) return;
  if (k > 0 && has_16bit_hardware(c.dtype())) {
    const int threads = detail::in_parallel_region() ? 1 : get_num_threads();
    const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
    if (threads == 1 || batch * m * n * k < (int64_t(1) << 20) || m < 32) {
      if (onednn_rows(a, b, c, trans_a, trans_b, 0, m)) return;
    } else {
      const int64_t grain = std::max<int64_t>(16, (m + threads - 1) / threads);
      bool ok = true;
      detail::parallel_for(0, m, grain, [&](int64_t lo, int64_t hi) {
        if (!onednn_rows(a, b, c, trans_a, trans_b, lo, hi)) ok = false;
      });
      if (ok) return;
    }
  }
  // No hardware kernel (or an empty inner dim): float32 product, rounded once.
  Tensor wide_c = empty(c.shape());
  gemm(detail::widen(a), detail::widen(b), wide_c, trans_a, trans_b);
  copy(wide_c, c);
}

}  // namespace tandem::cpu

namespace tandem {

std::string cpu_gemm_path(DType t) {
  if (!is_floating(t)) return "none";
  if (accumulate_dtype(t) == t) return "float32/float64 GEMM (OpenBLAS where built with it)";
  if (!cpu::has_16bit_hardware(t))
    return "converted to float32 (this CPU has no " + std::string(name(t)) + " instructions)";
  const cpu::Operand o{0, {1, 64, 64}, {4096, 64, 1}};
  return "oneDNN " + cpu::primitive(t, o, o, o).impl;
}

}  // namespace tandem
