// Device parsing and printing, and dtype names.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

TEST(Device, ParsesAndPrintsEveryForm) {
  EXPECT_EQ(Device("cpu"), Device::cpu(0));
  EXPECT_EQ(Device("cpu:0"), Device::cpu(0));
  EXPECT_EQ(Device("cpu:3"), Device::cpu(3));
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  EXPECT_EQ(Device("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device("cpu").str(), "cpu");
  EXPECT_EQ(Device("cpu:1").str(), "cpu:1");
  EXPECT_EQ(Device("cuda:0").str(), "cuda:0");
  EXPECT_NE(Device("cpu:0"), Device("cpu:1"));
  EXPECT_TRUE(Device("cuda:2").is_cuda());
  EXPECT_EQ(Device("cuda:2").index(), 2);
}

TEST(Device, MalformedStringsThrowNamingTheString) {
  for (const char* bad : {"gpu:0", "cuda:-1", "cpu:x", "cpu:", "cuda:1x", "", "CPU", "cpu:99"}) {
    const std::string msg = error_message<DeviceError>([&] { Device d(bad); });
    EXPECT_THAT(msg, HasSubstr(std::string("'") + bad + "'")) << bad;
  }
}

TEST(DType, NamesAndSizes) {
  EXPECT_EQ(name(DType::f32), "float32");
  EXPECT_EQ(name(DType::f64), "float64");
  EXPECT_EQ(name(DType::i64), "int64");
  EXPECT_EQ(name(DType::b8), "bool");
  EXPECT_EQ(element_size(DType::f64), 8u);
  EXPECT_EQ(element_size(DType::b8), 1u);
}
