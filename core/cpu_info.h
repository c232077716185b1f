// core/cpu_info.h — which processor this is and which vector extensions it offers. Our machines
// are not all alike (Intel Sapphire Rapids with AVX-512, AVX512-FP16/BF16 and AMX; AMD Zen 4 with
// AVX-512 and AVX512-BF16), so `tandem devices` and every benchmark print this with their results.
// Read at run time with CPUID, never from the build's -march: a binary built on one host reports
// the host it runs on.
#pragma once

#include <string>
#include <vector>

namespace tandem {

struct CpuInfo {
  std::string model;  // the brand string, e.g. "AMD EPYC 9R14 96-Core Processor"
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false;
  bool avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;

  /// The extensions present, as their usual names: "AVX2", "FMA", "AVX-512", "AVX512-BF16", ...
  std::vector<std::string> extensions() const;
  /// "<model> (AVX2 FMA AVX-512 ...)": one line for a benchmark's header.
  std::string summary() const;
};

/// This machine's processor (read once). An extension counts only if the operating system also
/// saves its registers (XGETBV), as a program could otherwise not use it.
const CpuInfo& cpu_info();

}  // namespace tandem
