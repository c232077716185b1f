// The meta device: shapes and dtypes without memory or values. Ops run their checks and shape
// rules and "allocate" their outputs, which memory_stats(meta:N) counts as a real device would;
// anything that needs a value (item, a copy to a real device, data_ptr) is a DeviceError that
// says so.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

TEST(MetaDevice, ParsesAndPrints) {
  EXPECT_EQ(Device("meta"), Device::meta());
  EXPECT_EQ(Device("meta:3"), Device::meta(3));
  EXPECT_TRUE(Device("meta:3").is_meta());
  EXPECT_FALSE(Device("meta:3").is_cpu());
  EXPECT_EQ(Device("meta").str(), "meta");
  EXPECT_EQ(Device::meta(2).str(), "meta:2");
  EXPECT_NE(Device::meta(0), Device::cpu(0));
  for (const char* bad : {"meta:64", "meta:x", "meta:"})
    EXPECT_THAT(error_message<DeviceError>([&] { Device d(bad); }), HasSubstr(bad));
}

TEST(MetaDevice, OpsGiveShapesAndCountBytesWithoutMemory) {
  const Device m = Device::meta(7);
  const MemoryStats before = memory_stats(m);
  const MemoryStats host = memory_stats(Device::cpu(0));
  {
    Tensor a = randn({64, 32}, {.dtype = kFloat64, .device = m});  // 16 KiB, counted
    Tensor b = randn({32, 16}, {.dtype = kFloat64, .device = m});
    Tensor c = relu(matmul(a, b)).sum({1});
    EXPECT_EQ(c.shape(), (Shape{64}));
    EXPECT_EQ(c.dtype(), kFloat64);
    EXPECT_EQ(c.device(), m);
    EXPECT_EQ(memory_stats(m).allocated_bytes - before.allocated_bytes,
              (64 * 32 + 32 * 16 + 64) * 8);
    EXPECT_GE(memory_stats(m).peak_allocated_bytes - before.allocated_bytes,
              (64 * 32 + 32 * 16 + 64 * 16 * 2) * 8);
    // Shape errors are still the op's own.
    EXPECT_THAT(error_message<ShapeError>([&] { matmul(b, b); }), HasSubstr("matmul"));
    // A CPU tensor moved onto meta allocates on meta only.
    Tensor moved = ones({100}, {.dtype = kFloat64}).to(m);
    EXPECT_EQ(moved.device(), m);
  }
  EXPECT_EQ(memory_stats(m).allocated_bytes, before.allocated_bytes);  // all given back
  EXPECT_EQ(memory_stats(m).reserved_bytes, 0);
  EXPECT_EQ(memory_stats(Device::cpu(0)).allocated_bytes, host.allocated_bytes);
}

TEST(MetaDevice, AskingForAValueIsAClearError) {
  const Tensor t = zeros({2, 3}, {.device = Device::meta()});
  EXPECT_THAT(error_message<DeviceError>([&] { t.sum().item(); }), HasSubstr("no values"));
  EXPECT_THAT(error_message<DeviceError>([&] { t.to(Device::cpu()); }),
              HasSubstr("cannot copy a [2, 3] float32 tensor on meta to cpu"));
  EXPECT_THAT(error_message<DeviceError>([&] { t.data_ptr(); }), HasSubstr("has no memory"));
  EXPECT_EQ(t.str(), "tensor(..., device='meta', size=(2, 3))");
  EXPECT_EQ(zeros({4}, {.dtype = kInt64, .device = Device::meta(1)}).str(),
            "tensor(..., device='meta:1', size=(4,), dtype=int64)");
}

// Code that compares places (is this gradient already its bucket's view? do these overlap?) runs
// the same on meta: each allocation has a place of its own, and a view lies inside its base's.
TEST(MetaDevice, EachAllocationHasADistinctPlace) {
  const Device m = Device::meta(2);
  const Tensor a = zeros({64}, {.device = m}), b = zeros({64}, {.device = m});
  EXPECT_NE(a.address(), b.address());
  const char* base = static_cast<const char*>(a.address());
  EXPECT_EQ(a.narrow(0, 8, 8).address(), base + 8 * sizeof(float));
  const char* other = static_cast<const char*>(b.address());
  EXPECT_TRUE(other >= base + a.nbytes() || other + b.nbytes() <= base) << "they overlap";
  EXPECT_THAT(error_message<DeviceError>([&] { a.narrow(0, 8, 8).data_ptr(); }),
              HasSubstr("has no memory"));
  const Tensor c = zeros({4});  // and on the CPU, the address of the first element
  EXPECT_EQ(c.address(), c.data_ptr());
}
