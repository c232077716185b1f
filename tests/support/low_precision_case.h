// tests/support/low_precision_case.h — the parameter of tests that run a 16-bit kernel on the CPU
// and on cuda:0: the dtype and the device, a fixture that skips the CUDA cases visibly without a
// GPU, and the four cases with readable names (BFloat16OnCpu … Float16OnCuda0).
#pragma once

#include <string>

#include "support/expect.h"

namespace tandem::testing {

struct LowPrecisionCase {
  DType low;
  bool cuda;
};

class LowPrecisionOnDevice : public ::testing::TestWithParam<LowPrecisionCase> {
 protected:
  void SetUp() override {
    if (GetParam().cuda && !cuda::is_available())
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
  Device device() const { return GetParam().cuda ? Device::cuda(0) : Device::cpu(); }
};

inline auto low_precision_cases() {
  return ::testing::Values(LowPrecisionCase{kBFloat16, false}, LowPrecisionCase{kFloat16, false},
                           LowPrecisionCase{kBFloat16, true}, LowPrecisionCase{kFloat16, true});
}

inline std::string low_precision_case_name(const ::testing::TestParamInfo<LowPrecisionCase>& info) {
  return std::string(info.param.low == kBFloat16 ? "BFloat16" : "Float16") +
         (info.param.cuda ? "OnCuda0" : "OnCpu");
}

}  // namespace tandem::testing
