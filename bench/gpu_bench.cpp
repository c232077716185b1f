// bench/gpu_bench.cpp — Tandem's side of the GPU benchmarks (bench/gpu_bench.sh runs it together
// with bench/gpu_bench_torch.py on the same GPU and prints the ratios): one training step
// (forward, cross-entropy, backward, optimizer) of the MNIST reference CNN at batch 64 and 256
// with Adam, and of the MLP 784-512-256-10 at batch 256 with SGD-momentum; and a 4096³ float32
// GEMM in TFLOP/s. Issue 16's rows: the CNN at batch 256 under autocast (bfloat16; and float16
// with a gradient scaler), and the 4096³ GEMM in bfloat16; the CNN with batch norm after each
// convolution (issue 35). Prints "name value unit" lines. Times
// are medians over rounds, each round synchronised with the device at its ends.
#include <tandem/core/cpu_info.h>
#include <tandem/tandem.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "reference_models.h"

using namespace tandem;

namespace {

// Median milliseconds per call of f: `rounds` rounds of `reps` calls, device-synchronised.
template <typename F>
double median_ms(F&& f, int reps, int rounds = 7) {
  for (int i = 0; i < 5; ++i) f();  // warm-up: cuDNN algorithm choice, allocator cache
  cuda::synchronize(0);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    cuda::synchronize(0);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One step; `amp` bfloat16/float16 runs forward and loss under autocast (float16 with a scaler).
template <typename M, typename Opt>
double step_ms(M& model, Opt& opt, int64_t batch, Device d, DType amp = kFloat32) {
  manual_seed(0);
  const Tensor x = randn({batch, 1, 28, 28}).to(d);
  const Tensor y = zeros({batch}, {.dtype = kInt64}).to(d);
  optim::GradScaler scaler({.enabled = amp == kFloat16});
  return median_ms(
      [&] {
        opt.zero_grad();
        Tensor loss;
        {
          AutocastGuard autocast(DeviceType::CUDA, amp == kFloat32 ? kBFloat16 : amp,
                                 amp != kFloat32);
          loss = cross_entropy(model.forward(x), y);
        }
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
      },
      50);
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gpu_bench: no CUDA device visible\n");
    return 1;
  }
  const Device d = Device::cuda(0);
  std::printf("device %s, host CPU %s\n", cuda::device_name(0).c_str(),
              tandem::cpu_info().summary().c_str());
  for (int64_t batch : {64, 256}) {
    manual_seed(0);
    bench::ReferenceCnn cnn;
    cnn.to(d);
    optim::Adam adam(cnn.parameters(), {.lr = 1e-3});
    std::printf("cnn_b%lld_ms %.4f ms\n", (long long)batch, step_ms(cnn, adam, batch, d));
  }
  {
    // The CNN with BatchNorm2d after each convolution: batch norm's forward and backward are one
    // cuDNN call each (autograd/ops/norm.cpp), the audit's weakest GPU path before.
    manual_seed(0);
    nn::Sequential bn_cnn(nn::Conv2d(1, 32, 3), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(32, 64, 3), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(1600, 128), nn::ReLU(), nn::Linear(128, 10));
    bn_cnn.to(d);
    optim::Adam adam(bn_cnn.parameters(), {.lr = 1e-3});
    std::printf("cnn_bn_b256_ms %.4f ms\n", step_ms(bn_cnn, adam, 256, d));
  }
  for (DType amp : {kBFloat16, kFloat16}) {
    manual_seed(0);
    bench::ReferenceCnn cnn;
    cnn.to(d);
    optim::Adam adam(cnn.parameters(), {.lr = 1e-3});
    std::printf("cnn_b256_%s_ms %.4f ms\n", amp == kBFloat16 ? "bf16" : "fp16",
                step_ms(cnn, adam, 256, d, amp));
  }
  {
    manual_seed(0);
    bench::ReferenceMlp mlp;
    mlp.to(d);
    optim::SGD sgd(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::printf("mlp_b256_ms %.4f ms\n", step_ms(mlp, sgd, 256, d));
  }
  {
    const int64_t n = 4096;
    manual_seed(0);
    const Tensor a = randn({n, n}).to(d), b = randn({n, n}).to(d);
    const double ms = median_ms([&] { (void)matmul(a, b); }, 20);
    std::printf("gemm4096_tflops %.3f TFLOP/s\n", 2.0 * n * n * n / (ms * 1e-3) / 1e12);
    const Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16);
    const double ms16 = median_ms([&] { (void)matmul(a16, b16); }, 20);
    std::printf("gemm4096_bf16_tflops %.3f TFLOP/s\n", 2.0 * n * n * n / (ms16 * 1e-3) / 1e12);
  }
  return 0;
}
