// Every row of the op table on cuda:0 against the CPU: the same float64 inputs, forward outputs
// and input gradients (for a random upstream gradient) within 1e-9 absolute + 1e-7 relative —
// float64 on both sides, so what remains is only the order of summation. Rows run again in
// float32 within 1e-4 + 1e-3 relative. Skipped, visibly, without a GPU.
// The same comparison runs everywhere on cpu:1, a second (virtual) CPU device: the kernels are the
// CPU's, so what it checks is the table itself, that each row keeps its work on its inputs' device
// (a helper tensor made on the default device fails there as it would on cuda:0).
#include "autograd/op_table.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::OpCase;
using tandem::testing::OpResult;

namespace {

// Forward, then backward of sum(out · g) for a fixed random g, on `device` in `dtype`.
OpResult run(const OpCase& row, Device device, DType dtype) {
  std::vector<Tensor> inputs;
  for (Tensor& x : tandem::testing::make_inputs(row, Device::cpu()))
    inputs.push_back(x.detach().to(dtype).to(device).requires_grad_());
  Tensor out = row.fn(inputs);
  manual_seed(7);
  const Tensor g = randn(out.shape(), {.dtype = dtype}).to(device);
  (out * g).sum().backward();
  OpResult r{out.detach().to(Device::cpu()), {}};
  for (Tensor& x : inputs)
    r.grads.push_back(x.grad().defined() ? x.grad().to(Device::cpu()) : Tensor());
  return r;
}

void compare(const OpCase& row, Device device, DType dtype, double atol, double rtol) {
  const OpResult cpu = run(row, Device::cpu(), dtype), other = run(row, device, dtype);
  tandem::testing::expect_close(other, cpu, atol, rtol, row.name);
}

class CudaMatchesCpu : public ::testing::TestWithParam<OpCase> {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_P(CudaMatchesCpu, Float64ForwardAndBackward) {
  compare(GetParam(), Device::cuda(0), kFloat64, 1e-9, 1e-7);
}
TEST_P(CudaMatchesCpu, Float32ForwardAndBackward) {
  compare(GetParam(), Device::cuda(0), kFloat32, 1e-4, 1e-3);
}

class Cpu1MatchesCpu : public ::testing::TestWithParam<OpCase> {};

TEST_P(Cpu1MatchesCpu, Float64ForwardAndBackward) {
  compare(GetParam(), Device::cpu(1), kFloat64, 1e-9, 1e-7);
}

INSTANTIATE_TEST_SUITE_P(OpTable, CudaMatchesCpu, ::testing::ValuesIn(tandem::testing::op_table()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(OpTable, Cpu1MatchesCpu, ::testing::ValuesIn(tandem::testing::op_table()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
