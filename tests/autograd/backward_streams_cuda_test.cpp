// Backward on CUDA follows PyTorch's stream semantics: each node runs on the stream its forward
// ran on, gradients that cross streams are waited for, and the stream that called backward()
// waits for all of it. Each case races without its rule: tens of milliseconds of GEMMs ahead on
// one stream, and kernels on a stream that is not ordered after it. Skipped, visibly, without a
// GPU.
#if TANDEM_HAS_CUDA
#include <tandem/core/cuda/stream.h>
#endif

#include "support/expect.h"

namespace tandem {
namespace {

#if TANDEM_HAS_CUDA
const Device kGpu = Device::cuda(0);

// x.grad of sum(tanh(...tanh(x·w)·w...)) over 20 layers of 2048 × 2048 (about 7 ms of float32
// GEMMs on an H100, each way). The forward runs under `forward_on`, backward() is called under
// `backward_from` (null: the default stream); the gradient is read on the backward() caller's
// stream.
Tensor chain_grad(cuda::Stream* forward_on, cuda::Stream* backward_from) {
  manual_seed(7);
  Tensor x = (randn({2048, 2048}) * 0.05).to(kGpu).detach().requires_grad_();
  Tensor w = (randn({2048, 2048}) * (1.0 / 45)).to(kGpu);
  cuda::synchronize(0);
  Tensor loss;
  {
    std::optional<cuda::StreamGuard> on;
    if (forward_on) on.emplace(*forward_on);
    Tensor h = x;
    for (int i = 0; i < 20; ++i) h = tanh(matmul(h, w));
    loss = h.sum();
  }
  std::optional<cuda::StreamGuard> from;
  if (backward_from) from.emplace(*backward_from);
  loss.backward();
  Tensor g = x.grad() * 1.0;  // on the caller's stream, right after backward returns
  cuda::synchronize(0);
  return g;
}

TEST(BackwardStreamsCuda, BackwardRunsOnTheForwardsStream) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const Tensor expected = chain_grad(nullptr, nullptr);
  cuda::Stream side(0);
  // Forward on a side stream, backward() from the default one: backward's first kernels must not
  // start before the forward's last have produced what they read.
  EXPECT_TRUE(tandem::testing::all_close(chain_grad(&side, nullptr), expected, 1e-5, 1e-6));
}

TEST(BackwardStreamsCuda, TheCallersStreamWaitsForBackward) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const Tensor expected = chain_grad(nullptr, nullptr);
  cuda::Stream side(0);
  // Forward on the default stream, backward() from a side stream: backward runs on the default
  // stream, and the side stream's read of x.grad comes after it.
  EXPECT_TRUE(tandem::testing::all_close(chain_grad(nullptr, &side), expected, 1e-5, 1e-6));
}

TEST(BackwardStreamsCuda, GradientsCrossingStreamsAreWaitedFor) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  // Two branches whose forwards ran on two streams, joined on a third: each node's gradient is
  // made on its stream and consumed on another.
  manual_seed(9);
  Tensor x = (randn({2048, 2048}) * 0.05).to(kGpu).detach().requires_grad_();
  Tensor w = (randn({2048, 2048}) * (1.0 / 45)).to(kGpu);
  cuda::synchronize(0);
  auto run = [&](bool streams) {
    x.set_grad(Tensor());
    cuda::Stream a(0), b(0);
    Tensor ha = x, hb = x;
    {
      std::optional<cuda::StreamGuard> on;
      if (streams) on.emplace(a);
      for (int i = 0; i < 10; ++i) ha = tanh(matmul(ha, w));
    }
    if (streams) cuda::stream_wait(0, cuda::current_stream_handle(0), a.get());
    {
      std::optional<cuda::StreamGuard> on;
      if (streams) on.emplace(b);
      for (int i = 0; i < 10; ++i) hb = tanh(matmul(hb, w));
    }
    if (streams) cuda::stream_wait(0, cuda::current_stream_handle(0), b.get());
    (ha * hb).sum().backward();
    Tensor g = x.grad() * 1.0;
    cuda::synchronize(0);
    return g;
  };
  const Tensor expected = run(false);
  EXPECT_TRUE(tandem::testing::all_close(run(true), expected, 1e-5, 1e-6));
}
#endif

}  // namespace
}  // namespace tandem
