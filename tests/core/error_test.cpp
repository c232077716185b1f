// Error messages name the op, both operands' shapes, dtypes and devices, and give a hint where a
// fix is likely. A message that stops naming its values fails here.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

TEST(Errors, MixingVirtualCpuDevicesIsADeviceErrorNamingBoth) {
  Tensor a = ones({2, 3}, {.device = Device("cpu:0")});
  Tensor b = ones({2, 3}, {.device = Device("cpu:1")});
  const std::string msg = error_message<DeviceError>([&] { (void)(a + b); });
  EXPECT_THAT(msg, HasSubstr("add"));
  EXPECT_THAT(msg, HasSubstr("cpu:1"));
  EXPECT_THAT(msg, HasSubstr("is on cpu:0 and"));  // as it was named
  EXPECT_THAT(msg, HasSubstr("[2, 3]"));
  EXPECT_THAT(msg, HasSubstr("hint:"));
  EXPECT_THROW(ones({2, 2}, {.device = Device("cpu:2")}).matmul(ones({2, 2})), DeviceError);
}

TEST(Errors, ShapeMismatchNamesBothShapes) {
  const std::string msg = error_message<ShapeError>([] {
    (void)(ones({64, 784}).matmul(ones({800, 10})));
  });
  EXPECT_THAT(msg, HasSubstr("matmul"));
  EXPECT_THAT(msg, HasSubstr("[64, 784]"));
  EXPECT_THAT(msg, HasSubstr("[800, 10]"));
  const std::string bc = error_message<ShapeError>([] { (void)(ones({2, 3}) * ones({4})); });
  EXPECT_THAT(bc, HasSubstr("[2, 3]"));
  EXPECT_THAT(bc, HasSubstr("[4]"));
}

TEST(Errors, DtypeMismatchNamesBothDtypes) {
  const std::string msg =
      error_message<DTypeError>([] { (void)(ones({2}) + ones({2}, {.dtype = kFloat64})); });
  EXPECT_THAT(msg, HasSubstr("float32"));
  EXPECT_THAT(msg, HasSubstr("float64"));
  EXPECT_THAT(msg, HasSubstr("[2]"));
  EXPECT_THROW(arange(3).relu(), DTypeError);
  EXPECT_THROW(ones({2}).data<double>(), DTypeError);
  EXPECT_THROW(arange(3).requires_grad_(), DTypeError);
}

TEST(Errors, CudaWithoutCudaIsAClearDeviceError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible; this checks the no-GPU path";
  const std::string msg =
      error_message<DeviceError>([] { (void)ones({2}, {.device = Device("cuda:0")}); });
  EXPECT_THAT(msg, HasSubstr("cuda:0"));
}

TEST(Errors, InternalErrorsAskForAReport) {
  const std::string msg =
      error_message<Error>([] { TD_INTERNAL_ASSERT(1 + 1 == 3, "math is broken"); });
  EXPECT_THAT(msg, HasSubstr("internal error in Tandem (please report)"));
  EXPECT_THAT(msg, HasSubstr("math is broken"));
}
