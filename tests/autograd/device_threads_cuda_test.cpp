// Backward across cpu and cuda:0: the cuda:0 nodes run on cuda:0's backward thread (which makes
// its device current and runs each node on its forward's stream), and the gradients match the
// same graph on the CPU. Skipped, visibly, without a GPU.
#include <tandem/autograd/engine.h>

#include "support/expect.h"

namespace tandem {
namespace {

// x on the CPU; one branch on the CPU, one on `other`; both tanh layers; summed on the CPU.
std::vector<Tensor> gradients(Device other, bool device_threads) {
  set_backward_device_threads(device_threads);
  manual_seed(3);
  Tensor x = randn({16, 32}, {.dtype = kFloat64}).requires_grad_();
  Tensor w0 = randn({32, 32}, {.dtype = kFloat64}).requires_grad_();
  Tensor w1 = randn({32, 32}, {.dtype = kFloat64}).to(other).detach().requires_grad_();
  Tensor a = linear(x, w0, Tensor()).tanh().sum();
  Tensor b = linear(x.to(other), w1, Tensor()).tanh().sum().to(Device::cpu());
  (a + b).backward();
  set_backward_device_threads(true);
  return {x.grad(), w0.grad(), w1.grad().to(Device::cpu())};
}

TEST(DeviceThreadsCuda, ACpuAndCudaGraphMatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const auto cpu = gradients(Device::cpu(1), true);
  for (bool threads : {true, false}) {
    const auto gpu = gradients(Device::cuda(0), threads);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(tandem::testing::all_close(gpu[i], cpu[i], 1e-9, 1e-7))
          << "gradient " << i << (threads ? " (cuda:0 thread)" : " (one thread)");
  }
}

}  // namespace
}  // namespace tandem
