// CUDA basics: the same tensors on cuda:0 as on the CPU. Skipped, visibly, without a GPU.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_F(Cuda, CopiesRoundTripThroughTheDevice) {
  Tensor host = arange(0, 10, 1, {.dtype = kFloat32});
  Tensor dev = host.to(Device("cuda:0"));
  EXPECT_EQ(dev.device(), Device("cuda:0"));
  EXPECT_EQ(values(dev.to(Device::cpu())), values(host));
  EXPECT_EQ(values(host.t().to(Device("cuda:0"))), values(host));
}

TEST_F(Cuda, FillsAndCountsMemory) {
  const int64_t before = memory_stats(Device("cuda:0")).allocated_bytes;
  Tensor z = full({1000}, 3.0, {.device = Device("cuda:0")});
  EXPECT_EQ(memory_stats(Device("cuda:0")).allocated_bytes - before, 4000);
  EXPECT_EQ(values(z), std::vector<double>(1000, 3.0));
}

TEST_F(Cuda, KernelsNotYetOnCudaFailWithTheirName) {
  Tensor a = ones({2}, {.device = Device("cuda:0")});
  EXPECT_THROW((void)(a + a), DeviceError);
}
