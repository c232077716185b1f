// nn layers, losses and optimizers on cuda:0 against the CPU: three training steps of a small CNN
// (conv, pooling, linear, cross-entropy; SGD-momentum and Adam) from the same weights and data end
// with the same parameters, within 1e-4 absolute + 1e-3 relative in float32. Skipped, visibly,
// without a GPU. The same training on cpu:1 (a second, virtual CPU device: the CPU's kernels) runs
// everywhere and must match exactly: it checks the test's own model and data (shapes, devices).
// The model must be well-conditioned for that tolerance: Adam divides by √v, so a parameter whose
// gradient is zero in exact arithmetic (a bias before batch norm) moves by ±lr on rounding noise
// alone, and no two backends agree on its sign. Float32 on the CPU against float64 on the CPU,
// within the same tolerance, checks that anywhere.
#include "parallel/ddp_models.h"
#include "support/expect.h"

using namespace tandem;

namespace {

struct SmallCnn : nn::Module {
  nn::Conv2d conv1{1, 8, 3}, conv2{8, 16, 3, {.padding = 1, .bias = false}};  // feeds batch norm
  nn::BatchNorm2d bn{16};
  nn::Linear fc{16 * 3 * 3, 10};
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("bn", bn);
    v("fc", fc);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv1(x)), {});  // [N,1,15,15] -> [N,8,13,13] -> [N,8,6,6]
    h = avg_pool2d(relu(bn(conv2(h))), {});     // [N,16,6,6] -> [N,16,3,3]
    return fc(h.flatten(1));
  }
};

std::vector<Tensor> train(Device device, bool adam, DType dtype = kFloat32) {
  manual_seed(3);
  SmallCnn model;
  model.to(dtype);
  model.to(device);
  auto opt = tandem::testing::make_optimizer(model, adam);
  manual_seed(4);
  const Tensor x = randn({8, 1, 15, 15}).to(dtype).to(device);
  const Tensor y = tensor({0, 1, 2, 3, 4, 5, 6, 7}, {.dtype = kInt64}).to(device);
  for (int step = 0; step < 3; ++step) {
    opt->zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt->step();
  }
  std::vector<Tensor> out;
  for (auto& [name, t] : model.state_dict()) out.push_back(t.to(Device::cpu()).to(kFloat64));
  return out;
}

// Every tensor of `got` within atol + rtol·|want| of the same one in `want`.
void expect_same_state(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double atol,
                       double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(tandem::testing::all_close(got[i], want[i], atol, rtol))
        << what << ", tensor " << i;
}

class CudaTraining : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  }
};

TEST_P(CudaTraining, ThreeStepsOnCudaMatchTheCpu) {
  const auto cpu = train(Device::cpu(), GetParam()), gpu = train(Device::cuda(0), GetParam());
  expect_same_state(gpu, cpu, 1e-4, 1e-3, "cuda:0");
}

// cuDNN's first heuristic pick (FFT, Winograd and atomics allowed, PyTorch's default) stays
// within the same tolerance of the CPU.
TEST_P(CudaTraining, ThreeStepsWithNondeterministicConvolutionsMatchTheCpu) {
  cuda::set_deterministic_convolutions(false);
  const auto gpu = train(Device::cuda(0), GetParam());
  cuda::set_deterministic_convolutions(true);
  expect_same_state(gpu, train(Device::cpu(), GetParam()), 1e-4, 1e-3, "cuda:0, first pick");
}

// With each shape's algorithm timed (set_cudnn_benchmark, PyTorch's cudnn.benchmark), first
// deterministic ones only, then any: the same tolerance of the CPU, and a second run, from the
// cached picks, gives the first run's bits.
TEST_P(CudaTraining, ThreeStepsWithTimedConvolutionAlgorithmsMatchTheCpu) {
  struct Restore {  // the defaults again, even if a step throws
    ~Restore() {
      cuda::set_deterministic_convolutions(true);
      cuda::set_cudnn_benchmark(false);
    }
  } restore;
  const auto cpu = train(Device::cpu(), GetParam());
  cuda::set_cudnn_benchmark(true);
  for (bool deterministic : {true, false}) {
    cuda::set_deterministic_convolutions(deterministic);
    const auto first = train(Device::cuda(0), GetParam());
    expect_same_state(first, cpu, 1e-4, 1e-3, deterministic ? "timed" : "timed, any");
    if (deterministic)
      expect_same_state(train(Device::cuda(0), GetParam()), first, 0, 0, "timed, again");
  }
}

TEST(CudnnBenchmark, IsOffByDefault) { EXPECT_FALSE(cuda::cudnn_benchmark()); }

TEST(Cpu1Training, ThreeStepsOnCpu1MatchTheCpu) {
  for (bool adam : {false, true}) {
    expect_same_state(train(Device::cpu(1), adam), train(Device::cpu(), adam), 0, 0,
                      adam ? "Adam" : "SGD");
  }
}

// The CUDA test's tolerance holds between float32 and float64 on the CPU: rounding alone does not
// move the parameters past it (it did, by 0.017, while conv2 had a bias in front of batch norm).
TEST(Cpu1Training, Float32MatchesFloat64WithinTheCudaTolerance) {
  for (bool adam : {false, true}) {
    expect_same_state(train(Device::cpu(), adam), train(Device::cpu(), adam, kFloat64), 1e-4, 1e-3,
                      adam ? "Adam" : "SGD");
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CudaTraining, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Adam" : "SgdMomentum"; });

}  // namespace
