// kernel_profile (core/kernels/profile.h): every kernel call between start() and stop() is one
// labelled, timed row, forward and backward (the engine's thread) alike; nothing is recorded
// outside; the same on cuda:0, timed by the GPU's events.
#include <tandem/core/kernels/kernels.h>

#include "support/expect.h"

using namespace tandem;

namespace {

const kernel_profile::Row* find_row(const std::vector<kernel_profile::Row>& rows,
                                    const std::string& kernel) {
  for (const kernel_profile::Row& r : rows)
    if (r.kernel == kernel) return &r;
  return nullptr;
}

// A matmul, an add and a relu forward; their backward; then a converting copy.
std::vector<kernel_profile::Row> profile_a_small_graph(Device device) {
  manual_seed(3);
  Tensor a = randn({64, 32}, {.device = device}).requires_grad_();
  Tensor b = randn({32, 16}, {.device = device}).requires_grad_();
  const Tensor bias = randn({64, 16}, {.device = device});
  kernel_profile::start();
  Tensor y = relu(matmul(a, b) + bias);
  y.backward(ones_like(y));
  Tensor half = y.detach().to(kBFloat16);
  return kernel_profile::stop();
}

void expect_the_small_graphs_rows(Device device, const std::string& type) {
  const std::vector<kernel_profile::Row> rows = profile_a_small_graph(device);
  ASSERT_FALSE(rows.empty());
  // matmul forward, then dA = dY·Bᵀ and dB = Aᵀ·dY in backward
  const kernel_profile::Row* gemm = find_row(rows, "gemm float32");
  ASSERT_NE(gemm, nullptr) << kernel_profile::format(rows);
  EXPECT_EQ(gemm->calls, 3);
  EXPECT_EQ(gemm->device, type);
  EXPECT_GT(gemm->ms, 0.0);
  // Each of the three is 64·32·16 multiply-adds, whichever operand is transposed.
  EXPECT_EQ(gemm->flops, 3 * 2.0 * 64 * 32 * 16);
  // Forward: a, b and the output, 4 bytes each: 64·32 + 32·16 + 64·16 floats.
  EXPECT_GE(gemm->bytes, 4.0 * (64 * 32 + 32 * 16 + 64 * 16));
  const kernel_profile::Row* add = find_row(rows, "binary add float32");
  ASSERT_NE(add, nullptr) << kernel_profile::format(rows);
  EXPECT_GE(add->calls, 1);
  EXPECT_EQ(add->flops, 0.0);
  EXPECT_NE(find_row(rows, "relu_backward float32"), nullptr) << kernel_profile::format(rows);
  EXPECT_NE(find_row(rows, "copy float32->bfloat16"), nullptr) << kernel_profile::format(rows);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_GE(rows[i - 1].ms, rows[i].ms);  // largest first
  const std::string table = kernel_profile::format(rows, 0, 2);
  EXPECT_NE(table.find("gemm float32"), std::string::npos) << table;
  EXPECT_NE(table.find("all kernels"), std::string::npos) << table;
  EXPECT_NE(table.find(" more)"), std::string::npos) << table;  // the rows past the limit
}

}  // namespace

// Each test leaves the profiler off, even when an expectation inside a profile throws.
class KernelProfile : public ::testing::Test {
 protected:
  void TearDown() override {
    if (kernel_profile::active()) (void)kernel_profile::stop();
  }
};

TEST_F(KernelProfile, TimesEveryKernelCallForwardAndBackwardOnTheCpu) {
  expect_the_small_graphs_rows(Device::cpu(), "cpu");
}

TEST_F(KernelProfile, RecordsNothingOutsideStartAndStop) {
  Tensor a = ones({8});
  const Kernels* plain = &kernels(Device::cpu());
  kernel_profile::start();
  EXPECT_TRUE(kernel_profile::active());
  EXPECT_NE(&kernels(Device::cpu()), plain);          // the timed table stands in
  EXPECT_THROW(kernel_profile::start(), ValueError);  // one profile at a time
  EXPECT_TRUE(kernel_profile::stop().empty());
  EXPECT_FALSE(kernel_profile::active());
  EXPECT_EQ(&kernels(Device::cpu()), plain);  // and is gone
  Tensor b = a + a;                           // after stop(): not recorded anywhere
  kernel_profile::start();
  EXPECT_TRUE(kernel_profile::stop().empty());
}

TEST_F(KernelProfile, ABroadcastOperandCountsTheMemoryBehindIt) {
  const Tensor x = ones({64, 16}), bias = ones({16});
  kernel_profile::start();
  Tensor y = x + bias;  // bias reaches the kernel as a stride-0 view of [64, 16]
  const std::vector<kernel_profile::Row> rows = kernel_profile::stop();
  const kernel_profile::Row* add = find_row(rows, "binary add float32");
  ASSERT_NE(add, nullptr) << kernel_profile::format(rows);
  EXPECT_EQ(add->calls, 1);
  EXPECT_EQ(add->bytes, 4.0 * (64 * 16 + 16 + 64 * 16));  // x, bias's 16 floats, y
}

TEST_F(KernelProfile, LabelsByTheFirstFloatingTensorAndACopyByBothDTypes) {
  const Tensor weight = ones({10, 4}).requires_grad_();
  const Tensor ids = from_vector<int64_t>({1, 3, 3}, {3});
  kernel_profile::start();
  embedding(weight, ids).sum().backward();  // embedding_backward(ids, dy, dweight)
  Tensor as_float = ids.to(kFloat32);
  const std::vector<kernel_profile::Row> rows = kernel_profile::stop();
  EXPECT_NE(find_row(rows, "embedding_backward float32"), nullptr) << kernel_profile::format(rows);
  EXPECT_NE(find_row(rows, "copy int64->float32"), nullptr) << kernel_profile::format(rows);
}

TEST_F(KernelProfile, SharesAreOfTheWholeStepWhenGiven) {
  const std::vector<kernel_profile::Row> rows = {{"gemm float32", "cpu", 2, 3.0},
                                                 {"binary add float32", "cpu", 5, 1.0}};
  const std::string table = kernel_profile::format(rows, 8.0);
  EXPECT_NE(table.find("37.5%"), std::string::npos) << table;  // 3 of the step's 8 ms
  EXPECT_NE(table.find("50.0%"), std::string::npos) << table;  // all kernels: 4 of 8
}

TEST_F(KernelProfile, TimesEveryKernelCallOnCuda0ByItsEvents) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  expect_the_small_graphs_rows(Device::cuda(0), "cuda");
}
