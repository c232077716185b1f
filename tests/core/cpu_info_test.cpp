// tests/core/cpu_info_test.cpp — the CPUID decoding in core/cpu_info.cpp against two independent
// readers of the same facts: the compiler's __builtin_cpu_supports and the kernel's flags in
// /proc/cpuinfo (which also drops what the OS does not enable). The machines this runs on differ,
// so each check compares; none assumes an extension is present.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/core/cpu_info.h>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

std::set<std::string> kernel_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> out;
      for (std::string w; words >> w;) out.insert(w);
      return out;
    }
  return {};
}

TEST(CpuInfo, AgreesWithTheCompilersCpuid) {
  const tandem::CpuInfo& c = tandem::cpu_info();
  EXPECT_EQ(c.avx2, bool(__builtin_cpu_supports("avx2")));
  EXPECT_EQ(c.fma, bool(__builtin_cpu_supports("fma")));
  EXPECT_EQ(c.avx512f, bool(__builtin_cpu_supports("avx512f")));
  EXPECT_EQ(c.avx512bw, bool(__builtin_cpu_supports("avx512bw")));
  EXPECT_EQ(c.avx512vl, bool(__builtin_cpu_supports("avx512vl")));
}

TEST(CpuInfo, AgreesWithTheKernelsFlags) {
  const std::set<std::string> flags = kernel_flags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo (Linux always has one)";
  const tandem::CpuInfo& c = tandem::cpu_info();
  const std::pair<const char*, bool> expected[] = {{"avx2", c.avx2},
                                                   {"fma", c.fma},
                                                   {"avx512f", c.avx512f},
                                                   {"avx512_vnni", c.avx512_vnni},
                                                   {"avx512_bf16", c.avx512_bf16},
                                                   {"avx512_fp16", c.avx512_fp16},
                                                   {"amx_tile", c.amx_tile},
                                                   {"amx_bf16", c.amx_bf16},
                                                   {"amx_int8", c.amx_int8}};
  for (const auto& [flag, ours] : expected) EXPECT_EQ(ours, flags.count(flag) == 1) << flag;
}

TEST(CpuInfo, SummaryNamesTheModelAndTheExtensions) {
  const tandem::CpuInfo& c = tandem::cpu_info();
  EXPECT_FALSE(c.model.empty());
  EXPECT_THAT(c.summary(), ::testing::StartsWith(c.model + " ("));
  for (const std::string& e : c.extensions()) EXPECT_THAT(c.summary(), ::testing::HasSubstr(e));
  EXPECT_EQ(c.avx512f, c.summary().find("AVX-512") != std::string::npos);
}

}  // namespace
