// bench/gpu_bench.cpp — Tandem's side of the GPU benchmarks (bench/gpu_bench.sh runs it together
// with bench/gpu_bench_torch.py on the same GPU, several times interleaved, and prints the ratios):
// one training step (forward, cross-entropy, backward, optimizer) of the MNIST reference CNN with
// Adam and of the MLP 784-512-256-10 with SGD-momentum at batch 64 … 4,096; the CNN at batch 256
// under autocast (bfloat16; float16 with a gradient scaler) and with BatchNorm2d after each
// convolution; ResNet-18 on 32×32 images (float32 and bfloat16) at batch 256; 4096³ GEMMs in
// float32 and bfloat16. Prints "name value unit" lines: for each step
// the wall time (`_ms`), the GPU time between CUDA events around the same steps (`_ms_gpu`) and
// the peak of allocated memory (`_ms_peak`, MiB); medians over rounds, each synchronised at its
// ends; and the library versions. Variants: `_graph` (the step as one CUDA graph), `_nondet`
// (cuDNN's first heuristic pick), `_timed` (every algorithm timed: cuda::set_cudnn_benchmark).
// `gpu_bench --profile`: instead, where the time of the steps
// that trail PyTorch goes, kernel by kernel (core/kernels/profile.h).
#include <tandem/core/cpu_info.h>
#include <tandem/core/cuda/graph.h>
#include <tandem/core/cuda/stream.h>
#include <tandem/tandem.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "reference_models.h"

using namespace tandem;

namespace {

bool g_profile = false;  // --profile

struct Timing {
  double wall_ms = 0, gpu_ms = 0, peak_mib = 0;
};

// Medians per call of f over `rounds` rounds of `reps` calls, each round device-synchronised: wall
// time, and GPU time between events recorded on the stream around the round; the peak of memory
// allocated on cuda:0 while they ran.
template <typename F>
Timing measure(F&& f, int reps, int rounds = 7) {
  for (int i = 0; i < 5; ++i) f();  // warm-up: cuDNN algorithm choice, allocator cache
  cuda::synchronize(0);
  reset_peak_memory_stats(Device::cuda(0));
  std::vector<double> wall, gpu;
  for (int r = 0; r < rounds; ++r) {
    cuda::Event start(/*timing=*/true), end(/*timing=*/true);
    start.record(cuda::current_stream(0));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    end.record(cuda::current_stream(0));
    cuda::synchronize(0);
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps);
    gpu.push_back(start.elapsed_ms(end) / reps);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(gpu.begin(), gpu.end());
  const double peak = double(memory_stats(Device::cuda(0)).peak_allocated_bytes) / (1 << 20);
  return {wall[wall.size() / 2], gpu[gpu.size() / 2], peak};
}

// 50 steps a round at batch 256, fewer for larger batches (a round stays near 50 ms or more).
int reps_for(int64_t batch) { return int(std::clamp<int64_t>(50 * 256 / batch, 5, 50)); }

// One step's timing; `amp` bfloat16/float16 runs forward and loss under autocast (float16 with a
// scaler).
// With `graph`, the step is captured once into a CUDA graph (after measure()'s warm-up steps,
// three more run eagerly first) and each timed step is one replay.
template <typename M, typename Opt>
Timing step(M& model, Opt& opt, int64_t batch, Device d, DType amp = kFloat32,
            const Shape& image = {1, 28, 28}, bool graph = false) {
  manual_seed(0);
  Shape shape{batch};
  shape.insert(shape.end(), image.begin(), image.end());
  const Tensor x = randn(shape).to(d);
  const Tensor y = zeros({batch}, {.dtype = kInt64}).to(d);
  optim::GradScaler scaler({.enabled = amp == kFloat16});
  auto train_step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DeviceType::CUDA, amp == kFloat32 ? kBFloat16 : amp, amp != kFloat32);
      loss = cross_entropy(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  if (!graph) {
    const Timing t = measure(train_step, reps_for(batch));
    if (g_profile) {  // one more step, each kernel timed by the GPU's events
      kernel_profile::start();
      train_step();
      std::printf("%s", kernel_profile::format(kernel_profile::stop(), t.wall_ms, 25).c_str());
    }
    return t;
  }
  for (int i = 0; i < 3; ++i) train_step();
  cuda::Graph g(d.index());
  g.capture(train_step);
  return measure([&] { g.replay(); }, reps_for(batch));
}

void print(const std::string& key, const Timing& t) {
  std::printf("%s %.4f ms\n%s_gpu %.4f ms\n%s_peak %.1f MiB\n", key.c_str(), t.wall_ms, key.c_str(),
              t.gpu_ms, key.c_str(), t.peak_mib);
}

// The reference CNN with Adam from seed 0: one step's timing, with step()'s options.
Timing cnn_step(int64_t batch, Device d, DType amp = kFloat32, bool graph = false) {
  manual_seed(0);
  bench::ReferenceCnn cnn;
  cnn.to(d);
  optim::Adam adam(cnn.parameters(), {.lr = 1e-3, .capturable = graph});
  return step(cnn, adam, batch, d, amp, {1, 28, 28}, graph);
}

// ResNet-18 on 32×32 images (torchvision's, with the CIFAR stem), SGD with momentum, batch 256:
// the batch-norm network of issue 35's list. Its rows, eager and (with `graph`) as a CUDA graph;
// `suffix` names a variant's keys.
void resnet18_rows(Device d, DType amp, bool graph, const std::string& suffix = "") {
  manual_seed(0);
  nn::Sequential resnet = nn::resnet18({.num_classes = 10, .small_images = true});
  resnet.to(d);
  optim::SGD sgd(resnet.parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
  const std::string key = std::string("resnet18_b256") + (amp == kBFloat16 ? "_bf16" : "");
  print(key + "_ms" + suffix, step(resnet, sgd, 256, d, amp, {3, 32, 32}));
  if (graph) print(key + "_ms_graph", step(resnet, sgd, 256, d, amp, {3, 32, 32}, true));
}

// --profile: the CNN where it trails (batch 4,096) and where it leads (256), and ResNet-18 in
// float32 and bfloat16; each table's shares are of the step's wall time.
void profile_steps(Device d) {
  g_profile = true;
  for (int64_t batch : {256, 4096}) {
    std::printf("\nCNN step, batch %lld, float32\n", (long long)batch);
    print("cnn_b" + std::to_string(batch) + "_ms", cnn_step(batch, d));
  }
  for (DType amp : {kFloat32, kBFloat16}) {
    std::printf("\nResNet-18 step, batch 256, %s\n",
                amp == kBFloat16 ? "bf16 autocast" : "float32");
    resnet18_rows(d, amp, false);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda::is_available()) {
    std::fprintf(stderr, "gpu_bench: no CUDA device visible\n");
    return 1;
  }
  const Device d = Device::cuda(0);
  std::printf("device %s, host CPU %s\n", cuda::device_name(0).c_str(),
              tandem::cpu_info().summary().c_str());
  const cuda::LibraryVersions v = cuda::library_versions();
  std::printf("versions cuda_runtime=%d driver=%d cublas=%d cudnn=%d\n", v.runtime, v.driver,
              v.cublas, v.cudnn);
  if (argc > 1 && std::string(argv[1]) == "--profile") {
    profile_steps(d);
    return 0;
  }
  for (int64_t batch : {64, 128, 256, 512, 1024, 2048, 4096}) {
    print("cnn_b" + std::to_string(batch) + "_ms", cnn_step(batch, d));
    manual_seed(0);
    bench::ReferenceMlp mlp;
    mlp.to(d);
    optim::SGD sgd(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    print("mlp_b" + std::to_string(batch) + "_ms", step(mlp, sgd, batch, d));
  }
  // The same steps as one CUDA graph each (core/cuda/graph.h): what launching costs is gone.
  for (int64_t batch : {64, 256}) {
    print("cnn_b" + std::to_string(batch) + "_ms_graph", cnn_step(batch, d, kFloat32, true));
    manual_seed(0);
    bench::ReferenceMlp mlp;
    mlp.to(d);
    optim::SGD sgd(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    print("mlp_b" + std::to_string(batch) + "_ms_graph",
          step(mlp, sgd, batch, d, kFloat32, {1, 28, 28}, true));
  }
  // cuDNN's first heuristic pick, as PyTorch takes it by default (FFT, Winograd, atomics allowed).
  cuda::set_deterministic_convolutions(false);
  for (int64_t batch : {256, 1024, 4096})
    print("cnn_b" + std::to_string(batch) + "_ms_nondet", cnn_step(batch, d));
  cuda::set_deterministic_convolutions(true);
  // Each convolution's algorithm timed on its first call, any algorithm (cuda::set_cudnn_benchmark
  // with determinism off): what PyTorch's tuned column runs (cudnn.benchmark).
  cuda::set_cudnn_benchmark(true);
  cuda::set_deterministic_convolutions(false);
  for (int64_t batch : {256, 1024, 4096})
    print("cnn_b" + std::to_string(batch) + "_ms_timed", cnn_step(batch, d));
  for (DType amp : {kFloat32, kBFloat16}) resnet18_rows(d, amp, false, "_timed");
  cuda::set_deterministic_convolutions(true);
  cuda::set_cudnn_benchmark(false);
  {
    // The CNN with BatchNorm2d after each convolution: batch norm's forward and backward are one
    // cuDNN call each (autograd/ops/norm.cpp), the audit's weakest GPU path before.
    manual_seed(0);
    nn::Sequential bn_cnn(nn::Conv2d(1, 32, 3), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(32, 64, 3), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(1600, 128), nn::ReLU(), nn::Linear(128, 10));
    bn_cnn.to(d);
    optim::Adam adam(bn_cnn.parameters(), {.lr = 1e-3});
    print("cnn_bn_b256_ms", step(bn_cnn, adam, 256, d));
  }
  for (DType amp : {kFloat32, kBFloat16}) resnet18_rows(d, amp, true);
  for (DType amp : {kBFloat16, kFloat16})
    print(std::string("cnn_b256_") + (amp == kBFloat16 ? "bf16" : "fp16") + "_ms",
          cnn_step(256, d, amp));
  {
    const int64_t n = 4096;
    manual_seed(0);
    const Tensor a = randn({n, n}).to(d), b = randn({n, n}).to(d);
    const double ms = measure([&] { (void)matmul(a, b); }, 20).gpu_ms;
    std::printf("gemm4096_tflops %.3f TFLOP/s\n", 2.0 * n * n * n / (ms * 1e-3) / 1e12);
    const Tensor a16 = a.to(kBFloat16), b16 = b.to(kBFloat16);
    const double ms16 = measure([&] { (void)matmul(a16, b16); }, 20).gpu_ms;
    std::printf("gemm4096_bf16_tflops %.3f TFLOP/s\n", 2.0 * n * n * n / (ms16 * 1e-3) / 1e12);
  }
  return 0;
}
