// float32 convolutions with 16 or more input channels per group run on oneDNN where the CPU has
// AVX-512 (kernels/cpu/conv_onednn.cpp: Winograd for 3x3 stride 1, direct kernels for the
// others); everything else, and float64 always,
// runs conv.cpp's im2col. Here the float32 result — output and all three gradients — is compared
// with float64 im2col on the same inputs, for the geometries a CNN uses (padding, stride,
// dilation, groups, with and without bias), on 1 and 2 threads (the batch split over tasks, the
// weight gradient summed over them). A wrong offset, layout or partial sum is off by the size of
// the values, far above float32's rounding.
#include <tandem/core/kernels/kernels.h>
#include <cmath>

#include "support/expect.h"

using namespace tandem;

namespace {

struct Geometry {
  const char* name;
  int64_t c, co, hw;
  Conv2dParams p;
};

TEST(ConvFloat32, MatchesFloat64Im2colOnEveryGeometryAndThreadCount) {
  const Geometry cases[] = {
      {"32->64 pad 1", 32, 64, 13, {.pad_h = 1, .pad_w = 1}},
      {"16->32 valid", 16, 32, 11, {}},
      {"32->32 stride 2", 32, 32, 12, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}},
      {"32->16 dilation 2", 32, 16, 11, {.dilation_h = 2, .dilation_w = 2}},
      {"32->32 groups 2", 32, 32, 9, {.pad_h = 1, .pad_w = 1, .groups = 2}},
      {"8->16 (im2col)", 8, 16, 9, {}},
  };
  const int saved = get_num_threads();
  for (int threads : {1, 2})
    for (const Geometry& c : cases)
      for (bool bias : {true, false}) {
        set_num_threads(threads);
        manual_seed(21);
        const Tensor x = randn({5, c.c, c.hw, c.hw});
        const Tensor w = randn({c.co, c.c / c.p.groups, 3, 3}) * 0.2;
        const Tensor b = bias ? randn({c.co}) : Tensor();
        auto run = [&](DType t) {
          Tensor xv = x.to(t).requires_grad_(), wv = w.to(t).requires_grad_();
          Tensor bv = bias ? b.to(t).requires_grad_() : Tensor();
          Tensor y = conv2d(xv, wv, bv, c.p);
          manual_seed(22);
          (y * randn(y.shape()).to(t)).sum().backward();
          std::vector<Tensor> out{y.detach(), xv.grad(), wv.grad()};
          if (bias) out.push_back(bv.grad());
          for (Tensor& o : out) o = o.to(kFloat64);
          return out;
        };
        const std::vector<Tensor> ref = run(kFloat64), got = run(kFloat32);
        const char* what[] = {"output", "input gradient", "weight gradient", "bias gradient"};
        for (size_t i = 0; i < ref.size(); ++i)
          EXPECT_TRUE(tandem::testing::all_close(got[i], ref[i], 2e-4, 1e-4))
              << c.name << ": " << what[i] << ", " << threads << " thread(s), bias " << bias
              << ", path: " << cpu_conv_path(kFloat32);
      }
  set_num_threads(saved);
}

}  // namespace
