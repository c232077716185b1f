// tests/nn/clip_grad_norm_test.cpp — clip_grad_norm_'s one pass over the gradients
// (Kernels::square_sums): the norm against a long double sum for gradients of every floating
// dtype, empty ones and more than a CUDA launch's 48; the same double at 1 and 2 threads; and the
// same on cuda:0 against the CPU, skipped visibly without a GPU.
#include "support/expect.h"

using namespace tandem;

namespace clip_grad_norm_test {

// Parameters with gradients of the given dtypes and sizes (values up to ~5), and the exact norm.
struct Grads {
  std::vector<Tensor> params;
  long double exact_square_sum = 0;
};

Grads draw(const std::vector<std::pair<DType, int64_t>>& specs, Device device) {
  manual_seed(21);
  Grads g;
  for (const auto& [dtype, n] : specs) {
    Tensor p = zeros({n}, {.dtype = dtype, .device = device}).requires_grad_();
    const Tensor grad = (randn({n}) * 2.0).to(dtype);
    for (double v : grad.to_vector<double>()) g.exact_square_sum += (long double)v * v;
    p.set_grad(grad.to(device));
    g.params.push_back(p);
  }
  return g;
}

std::vector<std::pair<DType, int64_t>> model_like() {
  // A GPT's shapes in miniature: matrices, biases, LayerNorms, an empty tensor, mixed dtypes, and
  // 60 tensors in all (a CUDA launch takes 48).
  std::vector<std::pair<DType, int64_t>> specs = {{kFloat32, 50000}, {kFloat32, 0}};
  for (int i = 0; i < 50; ++i) specs.push_back({kFloat32, 64 + 37 * i});
  for (DType d : {kFloat64, kBFloat16, kFloat16, kFloat32})
    for (int64_t n : {int64_t(1), int64_t(70000)}) specs.push_back({d, n});
  return specs;
}

TEST(ClipGradNormPass, MatchesALongDoubleSumOverEveryDType) {
  const Grads g = draw(model_like(), Device::cpu());
  const double norm = optim::clip_grad_norm_(g.params, 1e30);
  EXPECT_NEAR(norm, std::sqrt(double(g.exact_square_sum)), 1e-14 * norm);
}

TEST(ClipGradNormPass, GivesTheSameDoubleAtOneAndTwoThreads) {
  const Grads g = draw(model_like(), Device::cpu());
  const int threads = get_num_threads();
  set_num_threads(1);
  const double one = optim::clip_grad_norm_(g.params, 1e30);
  set_num_threads(2);
  const double two = optim::clip_grad_norm_(g.params, 1e30);
  set_num_threads(threads);
  EXPECT_EQ(one, two);
}

TEST(ClipGradNormPass, OnCuda0MatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  const Grads on_gpu = draw(model_like(), Device::cuda(0));
  const Grads on_cpu = draw(model_like(), Device::cpu());
  const double gpu = optim::clip_grad_norm_(on_gpu.params, 1e30);  // no scaling yet
  EXPECT_EQ(optim::clip_grad_norm_(on_gpu.params, 1e30), gpu) << "not the same bits twice";
  EXPECT_NEAR(gpu, std::sqrt(double(on_gpu.exact_square_sum)), 1e-14 * gpu);
  const double cpu = optim::clip_grad_norm_(on_cpu.params, 1.0);
  EXPECT_NEAR(gpu, cpu, 1e-14 * cpu);
  optim::clip_grad_norm_(on_gpu.params, 1.0);
  for (size_t i = 0; i < on_cpu.params.size(); ++i)  // and both scaled by max_norm / norm
    EXPECT_TRUE(tandem::testing::all_close(on_gpu.params[i].grad().to(Device::cpu()),
                                           on_cpu.params[i].grad(), 1e-6, 1e-5))
        << "gradient " << i;
}

}  // namespace clip_grad_norm_test
