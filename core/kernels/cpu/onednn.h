// core/kernels/cpu/onednn.h — what the CPU kernels that call oneDNN share: its engine and a stream
// per thread, tensors as oneDNN memory, and the rule for when oneDNN runs at all. oneDNN computes
// bfloat16 on AVX512-BF16 (Zen 4, Sapphire Rapids) and AMX (Sapphire Rapids), float16 on
// AVX512-FP16 (Sapphire Rapids); it picks its kernels from the CPU at run time, so one binary
// serves every host. Without those instructions it emulates the format and loses to float32
// sgemm (bench/bf16_gemm_bench), and the kernels widen to float32 instead.
#pragma once

#include <tandem/core/tensor.h>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

namespace tandem::cpu {

const dnnl::engine& onednn_engine();
/// The calling thread's stream (oneDNN's CPU streams run calls on the calling thread).
dnnl::stream& onednn_stream();
dnnl::memory::data_type onednn_type(DType t);  // float32, bfloat16 or float16
/// `t`'s memory from element `offset` on, described by `d` (no copy).
dnnl::memory onednn_memory(const dnnl::memory::desc& d, const Tensor& t, int64_t offset = 0);

/// The 2-D operand `b` (read as `plain`) in the layout `packed`, from the GEMM's cache of packed
/// weights; null when the caller should read `plain` instead: one of b's first two uses at its
/// version, no room left, or the cache is off (weight_cache.h).
std::shared_ptr<dnnl::memory> cached_weight(const Tensor& b, const dnnl::memory& plain,
                                            const dnnl::memory::desc& packed);

/// Whether the 16-bit dtype t goes to oneDNN on this CPU: the instructions are there and oneDNN
/// has a kernel for them (asked once).
bool has_16bit_hardware(DType t);
/// Why a 16-bit dtype is converted to float32 where has_16bit_hardware(t) is false: the CPU lacks
/// the instructions, or oneDNN has only its reference loop for them (float16 on Sapphire Rapids in
/// oneDNN 2.6). For `tandem devices`.
std::string no_16bit_hardware_reason(DType t);
/// True for an implementation worth calling ("brg:avx512_core_bf16", "gemm:jit", "jit:...");
/// false for oneDNN's reference loops ("ref:any").
inline bool is_optimized(const std::string& impl) { return impl.rfind("ref", 0) != 0; }

/// For its scope, the calling thread's OpenMP thread count is 1; the previous count comes back
/// after. oneDNN (on OpenMP in Debian) runs every call, and some primitive creations, over
/// omp_get_max_threads() threads; keeping that at 1 means no OpenMP team is ever started, whose
/// idle threads would spin on the cores the pool works on (measured: the 2-thread bf16 MLP step
/// ran slower than the 1-thread one until this). Restoring it matters to the program around
/// Tandem: other OpenMP code on the same thread (LibTorch, in bench/cnn_layers_bench) keeps its
/// own setting.
class OneOpenMpThread {
 public:
  OneOpenMpThread();
  ~OneOpenMpThread();
  OneOpenMpThread(const OneOpenMpThread&) = delete;
  OneOpenMpThread& operator=(const OneOpenMpThread&) = delete;

 private:
  int previous_;
};

}  // namespace tandem::cpu
