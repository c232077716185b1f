// The CPU convolution splits the batch over the thread pool and sums per-task partial gradients;
// max pooling has a vectorised 2×2 path. These check that every thread count gives the same
// values (to float rounding), that a run repeats bit for bit, and pooling's tie and NaN rules.
#include <cmath>
#include <limits>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::values;

namespace {

struct ConvResult {
  Tensor y, dx, dw, db;
};

ConvResult conv_step(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& dy,
                     const Conv2dParams& p) {
  Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(),
         b = b0.clone().requires_grad_();
  Tensor y = conv2d(x, w, b, p);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

// Restores the pool's size after a test changes it.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace

TEST(CpuConv2d, EveryThreadCountAndBatchSizeGivesTheSameGradients) {
  ThreadsGuard guard;
  manual_seed(11);
  const Conv2dParams plain{}, strided{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
      grouped{.pad_h = 1, .pad_w = 1, .groups = 2};
  for (int64_t channels : {4, 1})  // 1: a first layer on grey images
    for (const Conv2dParams& p : {plain, strided, grouped})
      for (int64_t batch : {1, 3, 5}) {  // fewer samples than threads, and uneven splits
        if (channels == 1 && p.groups > 1) continue;
        Tensor x = randn({batch, channels, 9, 20}), w = randn({6, channels / p.groups, 3, 3}),
               b = randn({6});
        set_num_threads(1);
        Tensor dy = randn(conv2d(x, w, b, p).shape());
        const ConvResult ref = conv_step(x, w, b, dy, p);
        for (int threads : {2, 3}) {
          set_num_threads(threads);
          const ConvResult r = conv_step(x, w, b, dy, p);
          const std::string what =
              "batch " + std::to_string(batch) + ", " + std::to_string(threads) + " threads";
          EXPECT_TRUE(all_close(r.y, ref.y, 1e-5, 1e-5)) << what;
          EXPECT_TRUE(all_close(r.dx, ref.dx, 1e-5, 1e-5)) << what;
          EXPECT_TRUE(all_close(r.dw, ref.dw, 1e-4, 1e-5)) << what;
          EXPECT_TRUE(all_close(r.db, ref.db, 1e-4, 1e-5)) << what;
          // Partial sums are added in a fixed order: a second run is identical, not just close.
          const ConvResult again = conv_step(x, w, b, dy, p);
          EXPECT_EQ(values(again.dw), values(r.dw)) << what;
          EXPECT_EQ(values(again.db), values(r.db)) << what;
        }
      }
}

TEST(CpuMaxPool2d, TwoByTwoPathKeepsTheFirstMaximumAndPropagatesNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // One 5×5 plane (the last row and column are outside every window), pooled 2×2 to 2×2:
  // window 0 is a tie (the first 7 wins), window 1 holds a NaN, window 2 has its maximum last.
  Tensor x = tensor({{7, 7, 1, nan, 9},  //
                     {7, 2, 3, 4, 9},    //
                     {0, 1, 2, 5, 9},    //
                     {3, 4, 6, 1, 9},    //
                     {9, 9, 9, 9, 9}})
                 .reshape({1, 1, 5, 5})
                 .requires_grad_();
  Tensor y = max_pool2d(x, {});
  const std::vector<double> v = values(y);
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], 7);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 4);
  EXPECT_EQ(v[3], 6);
  y.backward(ones({1, 1, 2, 2}));
  // The gradient goes to where each maximum was: (0,0), the NaN at (0,3), (3,1) and (3,2).
  std::vector<double> expected(25, 0.0);
  expected[0] = expected[3] = expected[16] = expected[17] = 1;
  EXPECT_EQ(values(x.grad()), expected);
}

TEST(CpuMaxPool2d, TwoByTwoPathMatchesTheDefinitionOnManyOddPlanes) {
  manual_seed(12);
  Tensor x = randn({3, 5, 11, 13}).requires_grad_();  // 15 planes of 11×13: blocks span planes
  Tensor dy = randn({3, 5, 5, 6});
  const std::vector<double> in = values(x), g = values(dy);
  std::vector<double> ref, dx_ref(in.size(), 0.0);
  for (int64_t q = 0; q < 15; ++q)
    for (int64_t oy = 0; oy < 5; ++oy)
      for (int64_t ox = 0; ox < 6; ++ox) {
        size_t at = 0;
        double m = -INFINITY;
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 2; ++j) {
            const size_t k = size_t(q * 143 + (2 * oy + i) * 13 + 2 * ox + j);
            if (in[k] > m) m = in[k], at = k;
          }
        ref.push_back(m);
        dx_ref[at] = g[size_t((q * 5 + oy) * 6 + ox)];
      }
  Tensor y = max_pool2d(x, {});
  EXPECT_EQ(values(y), ref);
  // Backward writes every element of dx (the last row and column, outside every window, get 0):
  // a freed block of the same size, full of non-zeros, is what the allocator will hand it.
  { Tensor dirty = full(x.shape(), 7.0); }
  y.backward(dy);
  EXPECT_EQ(values(x.grad()), dx_ref);
}
