// cuBLAS is opened on first use, not linked (core/kernels/cuda/cublas.h says why). No GPU is
// needed to open the library and look up its functions, so this runs on every CUDA build.
#include "support/expect.h"

#if TANDEM_HAS_CUDA
#include <tandem/core/kernels/cuda/cublas.h>
#include <fstream>
#include <string>

namespace {

bool mapped(const std::string& library) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(library) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(CublasLoader, ProcessesStartWithoutCublasAndTheFirstUseOpensEveryFunction) {
  // Each ctest entry is a process of its own, so this sees the state at start-up; run in one
  // process with others, an earlier GPU test may have opened it already.
  if (!mapped("libcublas")) {
    EXPECT_FALSE(mapped("libcublasLt")) << "linked, not deferred";
  }
  const tandem::cuda::Cublas& api = tandem::cuda::cublas();
  for (const void* f :
       {(const void*)api.Create, (const void*)api.Destroy, (const void*)api.SetStream,
        (const void*)api.SetMathMode, (const void*)api.GetStatusString, (const void*)api.Sgemm,
        (const void*)api.Dgemm, (const void*)api.SgemmStridedBatched,
        (const void*)api.DgemmStridedBatched, (const void*)api.GemmEx,
        (const void*)api.GemmStridedBatchedEx})
    EXPECT_NE(f, nullptr);
  EXPECT_STREQ(api.GetStatusString(CUBLAS_STATUS_SUCCESS), "success");  // a call into it works
  EXPECT_TRUE(mapped("libcublas"));
  EXPECT_EQ(&tandem::cuda::cublas(), &api) << "opened once";
}

#else
TEST(CublasLoader, ProcessesStartWithoutCublasAndTheFirstUseOpensEveryFunction) {
  GTEST_SKIP() << "built without CUDA";
}
#endif
