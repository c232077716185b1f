// core/cpu_info.cpp — CPUID leaves 1 and 7 (sub-leaves 0 and 1), the brand string from
// 0x80000002–4, and XCR0 for what the OS enables (Intel SDM vol. 2, "CPUID"; AMD APM vol. 3).
#include <tandem/core/cpu_info.h>
#include <cstdint>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tandem {

namespace {

#if defined(__x86_64__) || defined(__i386__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

bool bit(unsigned reg, int n) { return (reg >> n) & 1u; }

uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuInfo detect() {
  CpuInfo info;
  char brand[49] = {};
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000004u)
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i, &r, 16);
    }
  info.model = brand;
  while (!info.model.empty() && info.model.back() == ' ') info.model.pop_back();
  if (info.model.empty()) info.model = "unknown x86-64 CPU";

  const Regs l1 = cpuid(1), l7 = cpuid(7, 0), l7s1 = cpuid(7, 1);
  const bool osxsave = bit(l1.c, 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  const bool ymm = (xcr & 0x6) == 0x6;            // SSE + AVX state
  const bool zmm = ymm && (xcr & 0xE0) == 0xE0;   // + opmask, ZMM0-15 upper halves, ZMM16-31
  const bool tiles = (xcr & 0x60000) == 0x60000;  // AMX TILECFG + TILEDATA
  info.fma = ymm && bit(l1.c, 12);
  info.avx2 = ymm && bit(l7.b, 5);
  info.avx512f = zmm && bit(l7.b, 16);
  info.avx512bw = info.avx512f && bit(l7.b, 30);
  info.avx512vl = info.avx512f && bit(l7.b, 31);
  info.avx512_vnni = info.avx512f && bit(l7.c, 11);
  info.avx512_bf16 = info.avx512f && bit(l7s1.a, 5);
  info.avx512_fp16 = info.avx512f && bit(l7.d, 23);
  // Linux also wants arch_prctl(ARCH_REQ_XCOMP_PERM) before a process uses the tiles; the
  // hardware and the OS's support are what this reports.
  info.amx_bf16 = tiles && bit(l7.d, 22);
  info.amx_tile = tiles && bit(l7.d, 24);
  info.amx_int8 = tiles && bit(l7.d, 25);
  return info;
}
#else
CpuInfo detect() { return CpuInfo{.model = "non-x86 CPU"}; }
#endif

}  // namespace

std::vector<std::string> CpuInfo::extensions() const {
  std::vector<std::string> out;
  const std::pair<bool, const char*> all[] = {{avx2, "AVX2"},
                                              {fma, "FMA"},
                                              {avx512f, "AVX-512"},
                                              {avx512bw, "AVX512-BW"},
                                              {avx512vl, "AVX512-VL"},
                                              {avx512_vnni, "AVX512-VNNI"},
                                              {avx512_bf16, "AVX512-BF16"},
                                              {avx512_fp16, "AVX512-FP16"},
                                              {amx_tile, "AMX-TILE"},
                                              {amx_bf16, "AMX-BF16"},
                                              {amx_int8, "AMX-INT8"}};
  for (const auto& [present, name] : all)
    if (present) out.emplace_back(name);
  return out;
}

std::string CpuInfo::summary() const {
  std::string s = model + " (";
  const auto ext = extensions();
  for (size_t i = 0; i < ext.size(); ++i) s += (i ? " " : "") + ext[i];
  return s + (ext.empty() ? "no AVX2)" : ")");
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace tandem
