// Layers against hand-computed or naive reference values, and their error messages.
#include <cmath>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

namespace {

// Direct 7-loop convolution: the definition, for comparison with im2col + GEMM.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t co = w.size(0), kh = w.size(2), kw = w.size(3), cg = c / p.groups,
                cog = co / p.groups;
  const int64_t ho = (h + 2 * p.pad_h - p.dilation_h * (kh - 1) - 1) / p.stride_h + 1;
  const int64_t wo = (wd + 2 * p.pad_w - p.dilation_w * (kw - 1) - 1) / p.stride_w + 1;
  const std::vector<double> X = values(x), W = values(w),
                            B = b.defined() ? values(b) : std::vector<double>(size_t(co), 0);
  std::vector<double> Y(size_t(n * co * ho * wo));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < co; ++o)
      for (int64_t y = 0; y < ho; ++y)
        for (int64_t z = 0; z < wo; ++z) {
          double acc = B[size_t(o)];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < kh; ++a)
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t iy = y * p.stride_h - p.pad_h + a * p.dilation_h,
                              ix = z * p.stride_w - p.pad_w + e * p.dilation_w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += X[size_t(((i * c) + (o / cog) * cg + ci) * h * wd + iy * wd + ix)] *
                       W[size_t(((o * cg + ci) * kh + a) * kw + e)];
              }
          Y[size_t(((i * co + o) * ho + y) * wo + z)] = acc;
        }
  return from_vector(Y, {n, co, ho, wo}).to(x.dtype());
}

}  // namespace

TEST(Conv2d, MatchesTheDefinitionForEveryOption) {
  manual_seed(2);
  const std::vector<std::pair<Conv2dParams, Shape>> cases = {
      {{}, {3, 2, 3, 3}},
      {{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, {4, 2, 3, 3}},
      {{.dilation_h = 2, .dilation_w = 2}, {2, 2, 2, 2}},
      {{.pad_h = 2, .pad_w = 0, .groups = 2}, {4, 1, 3, 1}},
      {{.stride_h = 1, .stride_w = 3, .pad_h = 3, .pad_w = 1}, {2, 2, 2, 3}},  // pad > kernel
      {{.stride_h = 3, .pad_h = 2, .pad_w = 2, .dilation_h = 2}, {3, 2, 3, 2}},
      {{}, {3, 1, 3, 3}}};  // one input channel
  for (const auto& [p, wshape] : cases) {
    const int64_t c = wshape[1] * p.groups;
    Tensor x = randn({2, c == 1 ? 1 : 2, 7, c == 1 ? 13 : 6}), w = randn(wshape),
           b = randn({wshape[0]});
    EXPECT_TRUE(all_close(conv2d(x, w, b, p), naive_conv2d(x, w, b, p), 1e-4, 1e-4)) << wshape;
  }
}

TEST(Conv2d, ErrorsNameTheShapes) {
  const std::string msg = error_message<ShapeError>([] {
    (void)nn::Conv2d(3, 8, 3)(randn({2, 1, 8, 8}));
  });
  EXPECT_THAT(msg, HasSubstr("[2, 1, 8, 8]"));
  EXPECT_THAT(msg, HasSubstr("[8, 3, 3, 3]"));
  EXPECT_THROW(nn::Conv2d(1, 2, 5)(randn({1, 1, 3, 3})), ShapeError);
  // Too small with a stride: (2 − 3) / 2 truncates to 0 in C++, which must not pass for one row.
  EXPECT_THROW(nn::Conv2d(1, 2, 3, {.stride = 2})(randn({1, 1, 2, 8})), ShapeError);
  EXPECT_THROW(nn::Conv2d(1, 2, 3)(randn({1, 8, 8})), ShapeError);
  EXPECT_THROW(nn::Conv2d(3, 4, 3, {.groups = 2}), ValueError);
}

TEST(Pooling, MaxAndAverageValues) {
  Tensor x = arange(0, 16, 1, {.dtype = kFloat32}).reshape({1, 1, 4, 4});
  EXPECT_EQ(values(nn::MaxPool2d(2)(x)), (std::vector<double>{5, 7, 13, 15}));
  EXPECT_EQ(values(nn::AvgPool2d(2)(x)), (std::vector<double>{2.5, 4.5, 10.5, 12.5}));
  EXPECT_EQ(nn::MaxPool2d(3, {.stride = 1})(x).shape(), (Shape{1, 1, 2, 2}));
  // One row is smaller than the window, though (1 − 2) / 2 + 1 is 1 in C++.
  EXPECT_THROW(nn::MaxPool2d(2)(zeros({1, 1, 1, 5})), ShapeError);
  EXPECT_THROW(nn::AvgPool2d(2)(zeros({1, 1, 5, 1})), ShapeError);
  // Padding counted in the average (PyTorch's default) or not.
  EXPECT_NEAR(nn::AvgPool2d(2, {.padding = 1})(x).to_vector<double>()[0], 0.0 / 4, 1e-6);
  EXPECT_NEAR(nn::AvgPool2d(3, {.stride = 3, .padding = 1, .count_include_pad = false})(x)
                  .to_vector<double>()[0],
              2.5, 1e-6);
}

TEST(BatchNorm, NormalisesAndTracksRunningStatistics) {
  manual_seed(4);
  nn::BatchNorm2d bn(3);
  Tensor x = randn({8, 3, 4, 4}) * 3.0 + 2.0;
  Tensor y = bn(x);
  EXPECT_TRUE(all_close(y.mean({0, 2, 3}), zeros({3}), 1e-5));
  EXPECT_TRUE(all_close((y * y).mean({0, 2, 3}), ones({3}), 1e-3));
  const std::vector<double> batch_mean = values(x.mean({0, 2, 3}));
  for (size_t c = 0; c < 3; ++c) EXPECT_NEAR(values(bn.running_mean)[c], 0.1 * batch_mean[c], 1e-5);
  EXPECT_EQ(bn.num_batches_tracked.item(), 1);
  bn.eval();
  Tensor e = bn(x);  // eval: running statistics
  EXPECT_FALSE(all_close(e, y, 1e-3));
  EXPECT_THROW(bn(randn({8, 4, 4, 4})), ShapeError);
}

TEST(Dropout, ZeroesAboutPAndScalesTheRest) {
  manual_seed(6);
  nn::Dropout drop(0.25);
  Tensor y = drop(ones({100000}));
  const std::vector<double> v = values(y);
  const double zeros_frac = double(std::count(v.begin(), v.end(), 0.0)) / double(v.size());
  EXPECT_NEAR(zeros_frac, 0.25, 0.01);
  EXPECT_NEAR(y.mean().item(), 1.0, 0.01);
  for (double e : v) ASSERT_TRUE(e == 0.0 || std::abs(e - 1 / 0.75) < 1e-6);
  drop.eval();
  EXPECT_EQ(values(drop(ones({10}))), std::vector<double>(10, 1.0));
}

TEST(CrossEntropy, ValuesReductionsSmoothingAndIgnoreIndex) {
  Tensor logits = tensor({{1, 2, 3}, {1, 1, 1}});
  Tensor t = from_vector(std::vector<int64_t>{2, 0}, {2});
  const double l0 = std::log(std::exp(1) + std::exp(2) + std::exp(3)) - 3, l1 = std::log(3.0);
  EXPECT_NEAR(cross_entropy(logits, t).item(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(cross_entropy(logits, t, {.reduction = Reduction::Sum}).item(), l0 + l1, 1e-6);
  EXPECT_TRUE(
      all_close(cross_entropy(logits, t, {.reduction = Reduction::None}), tensor({l0, l1})));
  Tensor ignored = from_vector(std::vector<int64_t>{2, -100}, {2});
  EXPECT_NEAR(cross_entropy(logits, ignored).item(), l0, 1e-6);  // mean over the kept row only
  // Smoothing ε: (1 − ε)·nll + ε·mean_j(−log p_j)
  const double lse = std::log(std::exp(1) + std::exp(2) + std::exp(3));
  const double smooth = 0.9 * l0 + 0.1 * ((lse - 1) + (lse - 2) + (lse - 3)) / 3;
  EXPECT_NEAR(
      cross_entropy(logits.narrow(0, 0, 1), t.narrow(0, 0, 1), {.label_smoothing = 0.1}).item(),
      smooth, 1e-6);
  EXPECT_NEAR(nll_loss(logits.log_softmax(1), t).item(), (l0 + l1) / 2, 1e-6);
  EXPECT_NEAR(mse_loss(tensor({1, 2}), tensor({2, 4})).item(), 2.5, 1e-6);
}

TEST(CrossEntropy, BadTargetsNameTheValueAndIndex) {
  Tensor logits = zeros({40, 10});
  std::vector<int64_t> t(40, 1);
  t[37] = 12;
  const std::string msg =
      error_message<IndexError>([&] { (void)cross_entropy(logits, from_vector(t, {40})); });
  EXPECT_THAT(msg, HasSubstr("target value 12 at index 37 is out of range [0, 10)"));
  const std::string dt =
      error_message<DTypeError>([&] { (void)cross_entropy(logits, zeros({40})); });
  EXPECT_THAT(dt, HasSubstr("target has dtype float32; expected int64 class indices in [0, 10)"));
  EXPECT_THROW(cross_entropy(logits, from_vector(std::vector<int64_t>(3, 0), {3})), ShapeError);
}
