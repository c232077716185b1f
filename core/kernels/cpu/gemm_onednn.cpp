// core/kernels/cpu/gemm_onednn.cpp — matrix products through oneDNN's matmul primitive (Debian's
// libdnnl 2.6, the library LibTorch uses), which picks its kernel from the CPU at run time, so one
// binary serves every host.
// - bfloat16 / float16: float32 accumulation on the instructions made for it (AMX tiles on
//   Sapphire Rapids, AVX512-BF16 on Zen 4). Where oneDNN only has a kernel that emulates the
//   format (no such instructions, or float16 on Zen 4), converting to float32 and calling sgemm
//   is faster (bench/bf16_gemm_bench), so that is what runs there.
// - float32, where oneDNN has its AVX-512 "brgemm" kernels: they beat OpenBLAS's sgemm at one
//   thread on every product of a training step above a million multiply-adds, most of all on short
//   ones (a pipeline's 64-row micro-batch against a 2048×2048 weight: 0.76 of sgemm's time; a full
//   512-row batch: 0.90; bench/gemm_bench). Elsewhere (AVX2 only: oneDNN's gemm:jit, slower than
//   OpenBLAS) and for small products, where a call's fixed cost shows, OpenBLAS runs.
// cpu_gemm_path() says which, for `tandem devices`. A plain right-hand operand met again
// unchanged (a pipeline step's weights: the third time, or the second when it was met three times
// before its last change) is handed to oneDNN packed in its own layout, from a cache only this
// file uses (weight_cache.h).
//
// Threads: as for sgemm (gemm_util.h), the pool owns them. oneDNN runs on OpenMP here, whose
// workers spin after each call and would fight the pool on 2 cores; so every call is made with one
// OpenMP thread, and a large product is split into blocks of rows or batch entries over the pool.
#include <strings.h>
#include <tandem/core/cpu_info.h>
#include <tandem/core/kernels/cpu/gemm_util.h>
#include <tandem/core/kernels/cpu/kernels_cpu.h>
#include <tandem/core/kernels/cpu/onednn.h>
#include <tandem/core/kernels/cpu/weight_cache.h>
#include <tandem/core/kernels/widen.h>
#include <tandem/core/layout.h>
#include <tandem/core/thread_pool.h>
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
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
  memory::desc weights;  // b's layout (oneDNN's own, for a packed b)
};

// The primitive for one set of operand layouts, created once per thread and kept (a training
// step multiplies the same few shapes over and over). With `packed_b`, b's layout is oneDNN's
// choice (weights_desc()), for an operand the weight cache keeps.
const Primitive& primitive(DType t, const Operand& a, const Operand& b, const Operand& c,
                           bool packed_b = false) {
  thread_local std::map<std::vector<int64_t>, Primitive> cache;
  std::vector<int64_t> key{int64_t(t), int64_t(packed_b)};
  for (const Operand* o : {&a, &b, &c}) {
    key.insert(key.end(), o->dims.begin(), o->dims.end());
    key.insert(key.end(), o->strides.begin(), o->strides.end());
  }
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() > 512) cache.clear();  // shapes that keep changing: do not grow without bound
  Primitive p;
  try {
    const memory::data_type dt = onednn_type(t);
    const memory::desc b_desc = packed_b ? memory::desc(b.dims, dt, memory::format_tag::any)
                                         : memory::desc(b.dims, dt, b.strides);
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(memory::desc(a.dims, dt, a.strides), b_desc,
                           memory::desc(c.dims, dt, c.strides)),
        onednn_engine());
    p.impl = pd.impl_info_str();
    p.weights = pd.weights_desc();
    // Its kernels ("brg:avx512_core_bf16", "gemm:jit", "brg:avx512_core_amx") run near the
    // instructions' peak for every layout we pass; "ref" is a plain loop.
    // For float32 only its AVX-512 brgemm kernels beat OpenBLAS.
    if (is_optimized(p.impl) && (t != DType::f32 || p.impl.rfind("brg", 0) == 0))
      p.matmul.emplace(pd);
  } catch (const dnnl::error&) {  // unimplemented for these operands: sgemm it is
    p.impl = "none";
  }
  return cache.emplace(std::move(key), std::move(p)).first->second;
}

// The rows [r0, r1) of a transposed a: a column block of the stored [k, m] matrix, copied out
// into a dense [k, rows] one (oneDNN's fast kernels refuse operands whose strides say they are
// part of a larger matrix, and the copy is k·rows elements against the block's k·rows·n products).
Tensor transposed_rows(const Tensor& a, int64_t r0, int64_t r1) {
  const int64_t k = a.size(-2), m = a.size(-1);
  return detail::contiguous(detail::as_strided(a, {k, r1 - r0}, {m, 1}, a.storage_offset() + r0));
}

// b as the weight cache keeps it (weight_cache.h), looked up once per product by whichever of its
// blocks comes first.
struct KeptB {
  bool cacheable = false;  // false: b is read as it is
  std::once_flag looked_up;
  std::shared_ptr<dnnl::memory> memory;  // null: read b as it is (see cached_weight)
};

// Whether the cache may keep b: a plain float32 matrix times a matrix (not a batch), large enough
// for a pass over it to be worth saving (a transposed one repacks three times slower: a
// transpose).
bool cacheable(const Tensor& b, const Tensor& c, bool tb) {
  constexpr int64_t kMinElements = int64_t(1) << 18;
  return c.dtype() == DType::f32 && c.dim() == 2 && b.dim() == 2 && !tb &&
         b.numel() >= kMinElements && weight_cache_enabled();
}

// c = op(a)·op(b) by oneDNN for batch entries [b0, b1) and rows [r0, r1) of c (a row block only
// of a single matrix); false when there is no kernel worth calling. Every descriptor is dense, so
// a block gets the same kind of kernel as the whole product, and each element of c is one sum over
// k in the same order (tests/core/gemm_float32_test.cpp checks that the bits do not depend on the
// split; oneDNN does not promise it).
bool onednn_block(const Tensor& a_in, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t b0,
                  int64_t b1, int64_t r0, int64_t r1, KeptB& kept) {
  const int64_t m = c.size(-2), n = c.size(-1), k = ta ? a_in.size(-2) : a_in.size(-1);
  const int64_t entries = b1 - b0, rows = r1 - r0;
  const bool packed = ta && rows < m;  // then a is [k, rows], from row 0
  const Tensor a = packed ? transposed_rows(a_in, r0, r1) : a_in;
  const int64_t lda = packed ? rows : m, first_row = packed ? 0 : r0;
  // A 2-D operand shared by every batch entry is a batch of one, which oneDNN broadcasts.
  const bool batched_a = a.dim() == 3, batched_b = b.dim() == 3;
  const int64_t a_entry = batched_a ? b0 * m * k : 0;
  const Operand oa{a_entry + (ta ? first_row : first_row * k),
                   {batched_a ? entries : 1, rows, k},
                   {rows * k, ta ? 1 : k, ta ? lda : 1}};
  const Operand ob{
      batched_b ? b0 * k * n : 0, {batched_b ? entries : 1, k, n}, {k * n, tb ? 1 : n, tb ? k : 1}};
  const Operand oc{b0 * m * n + r0 * n, {entries, rows, n}, {rows * n, n, 1}};
  OneOpenMpThread one;
  auto mem = [&](const Operand& o, const Tensor& t) {
    return onednn_memory(memory::desc(o.dims, onednn_type(c.dtype()), o.strides), t, o.offset);
  };
  if (kept.cacheable && entries == 1) {
    // As 2-D products: oneDNN picks a blocked layout for a 2-D b only.
    auto matrix = [](const Operand& o) {
      return Operand{o.offset, {o.dims[1], o.dims[2]}, {o.strides[1], o.strides[2]}};
    };
    const Operand a2 = matrix(oa), b2 = matrix(ob), c2 = matrix(oc);
    const Primitive& p = primitive(c.dtype(), a2, b2, c2, /*packed_b=*/true);
    const memory::desc plain(b2.dims, onednn_type(c.dtype()), b2.strides);
    if (p.matmul && p.weights != plain) {
      // The lookup never throws out of call_once: the flag would stay unset while the other
      // blocks wait on it (libstdc++'s call_once is pthread_once). A failed packing just means
      // the plain operand.
      std::call_once(kept.looked_up, [&]() noexcept {
        try {
          kept.memory = cached_weight(b, mem(b2, b), p.weights);
        } catch (...) {
          kept.memory = nullptr;
        }
      });
      if (kept.memory && kept.memory->get_desc() == p.weights) {
        p.matmul->execute(onednn_stream(), {{DNNL_ARG_SRC, mem(a2, a)},
                                            {DNNL_ARG_WEIGHTS, *kept.memory},
                                            {DNNL_ARG_DST, mem(c2, c)}});
        return true;
      }
    }
  }
  const Primitive& p = primitive(c.dtype(), oa, ob, oc);
  if (!p.matmul) return false;
  p.matmul->execute(
      onednn_stream(),
      {{DNNL_ARG_SRC, mem(oa, a)}, {DNNL_ARG_WEIGHTS, mem(ob, b)}, {DNNL_ARG_DST, mem(oc, c)}});
  return true;
}

// c = op(a)·op(b) by oneDNN on the pool's threads: a batch split by entries, one matrix by rows
// (blocks of at least 16), one block per thread the caller may use; false when oneDNN has no
// kernel worth calling for some block (the caller then computes all of c another way).
bool onednn_gemm(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb) {
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1, m = c.size(-2), n = c.size(-1);
  const int64_t k = ta ? a.size(-2) : a.size(-1);
  const int threads = detail::in_parallel_region() ? 1 : intra_op_threads();
  const bool by_entries = batch > 1;
  const int64_t side = by_entries ? batch : m;
  const int64_t blocks =
      threads == 1 || batch * m * n * k < kSplitMinMacs
          ? 1
          : std::min<int64_t>(threads, by_entries ? batch : std::max<int64_t>(1, m / 16));
  KeptB kept{.cacheable = cacheable(b, c, tb)};
  if (blocks == 1) return onednn_block(a, b, c, ta, tb, 0, batch, 0, m, kept);
  std::atomic<bool> ok{true};
  detail::parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t from = side * i / blocks, to = side * (i + 1) / blocks;
      const bool done = by_entries ? onednn_block(a, b, c, ta, tb, from, to, 0, m, kept)
                                   : onednn_block(a, b, c, ta, tb, 0, 1, from, to, kept);
      if (!done) ok = false;
    }
  });
  return ok;
}

// float32 goes to oneDNN for products of at least this many multiply-adds (the size below which
// gemm_util.h does not split either): below it a call's fixed cost (~2 µs) is more than OpenBLAS
// loses (bench/gemm_bench's small shapes).
constexpr int64_t kFloat32MinMacs = kSplitMinMacs;

}  // namespace

// c = op(a)·op(b) in a 16-bit dtype (shapes as gemm() in matmul.cpp), accumulated in float32.
void gemm_16bit(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  if (c.numel() == 0) return;
  if (k > 0 && has_16bit_hardware(c.dtype()) && onednn_gemm(a, b, c, trans_a, trans_b)) return;
  // No hardware kernel (or an empty inner dim): float32 product, rounded once.
  Tensor wide_c = empty(c.shape());
  gemm(detail::widen(a), detail::widen(b), wide_c, trans_a, trans_b);
  copy(wide_c, c);
}

bool gemm_float32_onednn(const Tensor& a, const Tensor& b, Tensor& c, bool trans_a, bool trans_b) {
  static const bool avx512 = cpu_info().avx512f;  // oneDNN's float32 brgemm kernels need it
  if (!avx512) return false;
  const int64_t batch = c.dim() == 3 ? c.size(0) : 1;
  const int64_t k = trans_a ? a.size(-2) : a.size(-1);
  if (batch * c.size(-2) * c.size(-1) * k < kFloat32MinMacs) return false;
  return onednn_gemm(a, b, c, trans_a, trans_b);
}

#ifdef EIGEN_USE_BLAS
extern "C" char* openblas_get_corename(void);
#endif

namespace {

// Which kernels sgemm/dgemm run, for cpu_gemm_path(). OpenBLAS picks them from the CPU when it
// loads; a CPU newer than its table gets its generic SSE3 ones ("Prescott"): Debian's 0.3.21 does
// that on Xeon family 6 model 207 (Emerald Rapids), where 1024³ sgemm then runs at 16 GFLOP/s
// instead of 109-131 on one core. Only the environment, read at load time, can change its choice.
std::string blas_kernels() {
#ifdef EIGEN_USE_BLAS
  const std::string core = openblas_get_corename();
  bool wide = false;  // kernels using AVX2 or wider
  for (const char* name : {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"})
    wide = wide || strcasecmp(core.c_str(), name) == 0;
  const CpuInfo& c = cpu_info();
  if (c.avx2 && !wide)
    return "OpenBLAS's " + core + " kernels, narrower than this CPU's (a CPU its table lacks, or " +
           "OPENBLAS_CORETYPE): OPENBLAS_CORETYPE=" +
           (c.avx512_bf16 ? "COOPERLAKE"
            : c.avx512f   ? "SKYLAKEX"
                          : "HASWELL") +
           " at start-up gives it wider ones";
  return "OpenBLAS's " + core + " kernels";
#else
  return "Eigen's own kernels";
#endif
}

}  // namespace
}  // namespace tandem::cpu

namespace tandem {

std::string cpu_gemm_path(DType t) {
  if (!is_floating(t)) return "none";
  const cpu::Operand o{0, {1, 64, 64}, {4096, 64, 1}};
  cpu::OneOpenMpThread one;  // as every product runs: primitives are made for one thread
  if (t == DType::f32) {
    const cpu::Primitive& p = cpu::primitive(t, o, o, o);
    return p.matmul ? "oneDNN " + p.impl +
                          " (sgemm under 2^20 multiply-adds: " + cpu::blas_kernels() + ")"
                    : "sgemm, " + cpu::blas_kernels() + " (oneDNN has only " + p.impl + ")";
  }
  if (t == DType::f64) return "dgemm, " + cpu::blas_kernels();
  if (!cpu::has_16bit_hardware(t))
    return "converted to float32 (" + cpu::no_16bit_hardware_reason(t) + ")";
  return "oneDNN " + cpu::primitive(t, o, o, o).impl;
}

}  // namespace tandem
