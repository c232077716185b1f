// relu_max_pool2d(x) is a fusion, so its whole contract is that it computes max_pool2d(relu(x)):
// the same values and the same gradients, bit for bit (both only select and copy), on the
// vectorised 2×2 path and on general windows, in every floating dtype, including the windows
// where relu decides (all negative, a zero maximum, a NaN). The op table adds the finite-difference
// check, the CUDA comparison and the cpu:1 run.
#include <cmath>
#include <limits>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

namespace {

struct Pooled {
  std::vector<double> y, dx;
};

// Forward and backward (with dy) of `pool` at a fresh copy of x.
template <typename F>
Pooled run(F pool, const Tensor& x0, const Tensor& dy) {
  Tensor x = x0.clone().requires_grad_();
  Tensor y = pool(x);
  // The backward fills dx from the allocator: hand it a dirty block first.
  { Tensor dirty = full(x.shape(), 7.0, {.dtype = x.dtype()}); }
  y.backward(dy);
  return {values(y), values(x.grad())};
}

}  // namespace

TEST(ReluMaxPool2d, EqualsMaxPoolOfReluInEveryDtypeAndWindow) {
  manual_seed(31);
  const Pool2dParams two_by_two{}, padded{3, 3, 2, 2, 1, 1}, overlapping{3, 3, 1, 1, 0, 0};
  for (DType dtype : {kFloat64, kFloat32, kBFloat16, kFloat16})
    for (const Pool2dParams& p : {two_by_two, padded, overlapping}) {
      // Shifted down so that about a third of the 2×2 windows hold no positive value, and
      // rounded to a coarse grid so that ties and exact zeros occur.
      std::vector<double> v = values(randn({3, 5, 11, 13}));
      for (double& e : v) e = std::round(e * 4.0 - 3.0) / 4.0;
      const Tensor x = from_vector(v, {3, 5, 11, 13}).to(dtype);
      const Tensor dy = randn(max_pool2d(x, p).shape()).to(dtype);
      const Pooled fused = run([&](const Tensor& t) { return relu_max_pool2d(t, p); }, x, dy);
      const Pooled apart = run([&](const Tensor& t) { return max_pool2d(relu(t), p); }, x, dy);
      const std::string what = std::string(name(dtype)) + ", window " + std::to_string(p.kernel_h) +
                               " stride " + std::to_string(p.stride_h) + " pad " +
                               std::to_string(p.pad_h);
      EXPECT_EQ(fused.y, apart.y) << what;
      EXPECT_EQ(fused.dx, apart.dx) << what;
    }
}

TEST(ReluMaxPool2d, WindowsWithoutAPositiveValuePassNoGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // One 4×4 plane pooled 2×2: window 0 is all negative, window 1 has 0 as its maximum, window 2
  // holds a NaN, window 3 a tie of positive values (the first wins).
  const Tensor x = tensor({{-1, -2, 0, -5},  //
                           {-3, -4, -1, 0},  //
                           {1, nan, 2, 3},   //
                           {4, 5, 3, 1}})
                       .reshape({1, 1, 4, 4});
  const Tensor dy = tensor({{10, 20}, {30, 40}}).reshape({1, 1, 2, 2});
  for (const Pooled& r : {run([](const Tensor& t) { return relu_max_pool2d(t, {}); }, x, dy),
                          run([](const Tensor& t) { return max_pool2d(relu(t), {}); }, x, dy)}) {
    EXPECT_EQ(r.y[0], 0);
    EXPECT_EQ(r.y[1], 0);
    EXPECT_TRUE(std::isnan(r.y[2]));
    EXPECT_EQ(r.y[3], 3);
    std::vector<double> expected(16, 0.0);
    expected[11] = 40;  // (2, 3): the first 3 of the tie; relu's gradient is 0 at NaN and at 0
    EXPECT_EQ(r.dx, expected);
  }
}

TEST(ReluMaxPool2d, ModuleIsReluThenMaxPool) {
  manual_seed(32);
  const Tensor x = randn({2, 3, 8, 8});
  nn::ReLUMaxPool2d fused(2);
  nn::Sequential apart(nn::ReLU(), nn::MaxPool2d(2));
  EXPECT_EQ(values(fused(x)), values(apart(x)));
  EXPECT_EQ(fused.type_name(), "ReLUMaxPool2d");
}

TEST(ReluMaxPool2d, BadInputNamesTheFusedOp) {
  const std::string msg = tandem::testing::error_message<ShapeError>([] {
    (void)relu_max_pool2d(zeros({1, 1, 1, 5}), {});
  });
  EXPECT_THAT(msg, ::testing::HasSubstr("relu_max_pool2d"));
  EXPECT_THAT(msg, ::testing::HasSubstr("[1, 1, 1, 5]"));
}
