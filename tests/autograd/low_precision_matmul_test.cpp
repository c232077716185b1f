// Matrix products and convolutions in bfloat16 and float16 at sizes where the CPU splits them
// over threads (kernels/cpu/gemm_onednn.cpp and conv_onednn.cpp: oneDNN where the CPU has the
// instructions, float32 otherwise): every layout a linear layer uses, batched and with a shared
// 2-D operand, and a 32->64 convolution with all its gradients, against float32 on the same
// (rounded) inputs. Each result is a sum accumulated in float32 and rounded once, so it is within
// the format's rounding of the float32 result: relative 2^-8 (bf16) / 2^-11 (f16), plus an
// absolute term for sums near zero.
#include <tandem/core/kernels/kernels.h>
#include <cmath>

#include "support/expect.h"

using namespace tandem;

namespace {

struct Case {
  const char* name;
  Shape a, b;
  bool ta, tb;
};

class LowPrecisionMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(LowPrecisionMatmul, MatchesFloat32OnEveryLayoutAndThreadCount) {
  const DType low = GetParam();
  const double tol = low == kBFloat16 ? 1e-2 : 2e-3;
  const Case cases[] = {
      {"a.b", {96, 256}, {256, 300}, false, false},  // 7.4 MFLOP: split over the pool
      {"a.bT", {96, 256}, {300, 256}, false, true},  // a linear layer's forward
      {"aT.b", {256, 96}, {256, 300}, true, false},  // its weight gradient
      {"aT.bT", {256, 96}, {300, 256}, true, true},
      {"batched", {4, 64, 128}, {4, 128, 80}, false, false},
      {"shared b", {4, 64, 128}, {128, 80}, false, false},
      {"one row", {1, 512}, {512, 700}, false, false},
  };
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases) {
      manual_seed(11);
      const Tensor a = randn(c.a).to(low), b = randn(c.b).to(low);
      auto op = [&](const Tensor& x) { return c.ta ? x.transpose(-2, -1) : x; };
      auto opb = [&](const Tensor& x) { return c.tb ? x.transpose(-2, -1) : x; };
      const Tensor ref = op(a.to(kFloat32)).matmul(opb(b.to(kFloat32)));
      const Tensor got = op(a).matmul(opb(b));
      EXPECT_EQ(got.dtype(), low) << c.name;
      // Scale the absolute tolerance by the size of a typical term: sqrt(K) for unit normals.
      const double k = double(c.ta ? c.a.end()[-2] : c.a.back());
      EXPECT_TRUE(tandem::testing::all_close(got.to(kFloat32), ref, tol * std::sqrt(k), tol))
          << c.name << ", " << threads << " thread(s), path: " << cpu_gemm_path(low);
    }
  }
  set_num_threads(saved);
}

// Convolutions with channel counts the blocked kernels are made for (oneDNN reorders NCHW into
// nChw16c and back; kernels/cpu/conv_onednn.cpp), forward and all three gradients, split over 1
// and 2 threads, with and without bias, against float32 on the same rounded inputs.
TEST_P(LowPrecisionMatmul, ConvolutionsAtRealSizesMatchFloat32) {
  const DType low = GetParam();
  const double tol = low == kBFloat16 ? 2e-2 : 4e-3;
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (bool bias : {true, false}) {
      manual_seed(12);
      const Tensor x = randn({6, 32, 13, 13}).to(low), w = (randn({64, 32, 3, 3}) * 0.1).to(low);
      const Tensor b = bias ? randn({64}).to(low) : Tensor();
      const Tensor g = randn({6, 64, 13, 13}).to(low);
      auto run = [&](DType t) {
        Tensor xv = x.to(t).requires_grad_(), wv = w.to(t).requires_grad_();
        Tensor bv = bias ? b.to(t).requires_grad_() : Tensor();
        Tensor y = conv2d(xv, wv, bv, {.pad_h = 1, .pad_w = 1});
        (y * g.to(t)).sum().backward();
        std::vector<Tensor> out{y.detach(), xv.grad(), wv.grad()};
        if (bias) out.push_back(bv.grad());
        for (Tensor& o : out) o = o.to(kFloat32);
        return out;
      };
      const std::vector<Tensor> ref = run(kFloat32), got = run(low);
      const char* what[] = {"output", "input gradient", "weight gradient", "bias gradient"};
      for (size_t i = 0; i < ref.size(); ++i) {
        // Sums of about 300 (outputs, input gradients) to 1,000 (weight and bias gradients)
        // terms: an absolute term scaled to match.
        const double scale = std::sqrt(i >= 2 ? 1014.0 : 288.0);
        EXPECT_TRUE(tandem::testing::all_close(got[i], ref[i], tol * scale, tol))
            << what[i] << ", " << threads << " thread(s), bias " << bias;
      }
    }
  }
  set_num_threads(saved);
}

INSTANTIATE_TEST_SUITE_P(Formats, LowPrecisionMatmul, ::testing::Values(kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
