// core/kernels/cpu/onednn.cpp — oneDNN's engine, streams and memory for the CPU kernels, and the
// decision whether a 16-bit dtype goes to oneDNN on this CPU.
#include <omp.h>
#include <tandem/core/cpu_info.h>
#include <tandem/core/kernels/cpu/onednn.h>

namespace tandem::cpu {

const dnnl::engine& onednn_engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream s(onednn_engine());
  return s;
}

dnnl::memory::data_type onednn_type(DType t) {
  if (t == DType::f32) return dnnl::memory::data_type::f32;
  return t == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f16;
}

dnnl::memory onednn_memory(const dnnl::memory::desc& d, const Tensor& t, int64_t offset) {
  char* p = static_cast<char*>(const_cast<void*>(t.data_ptr()));
  return dnnl::memory(d, onednn_engine(), p + offset * int64_t(element_size(t.dtype())));
}

OneOpenMpThread::OneOpenMpThread() : previous_(omp_get_max_threads()) {
  if (previous_ != 1) omp_set_num_threads(1);  // the calling thread's setting only
}
OneOpenMpThread::~OneOpenMpThread() {
  if (previous_ != 1) omp_set_num_threads(previous_);
}

namespace {

// AVX512-BF16 or AMX for bfloat16, AVX512-FP16 for float16.
bool has_16bit_instructions(DType t) {
  const CpuInfo& c = cpu_info();
  return t == DType::bf16 ? (c.avx512_bf16 || c.amx_bf16) : c.avx512_fp16;
}

}  // namespace

bool has_16bit_hardware(DType t) {
  // The instructions, then oneDNN must offer more than its reference loop for a plain product in
  // that type.
  auto probe = [](DType d) {
    if (!has_16bit_instructions(d)) return false;
    OneOpenMpThread one;
    try {
      const dnnl::memory::desc m({64, 64}, onednn_type(d), dnnl::memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m, m, m), onednn_engine());
      return is_optimized(pd.impl_info_str());
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool bf16 = probe(DType::bf16), f16 = probe(DType::f16);
  return t == DType::bf16 ? bf16 : f16;
}

std::string no_16bit_hardware_reason(DType t) {
  if (!has_16bit_instructions(t))
    return "this CPU has no " + std::string(name(t)) + " instructions";
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
         " has only a reference loop for " + std::string(name(t)) + " on this CPU";
}

}  // namespace tandem::cpu
