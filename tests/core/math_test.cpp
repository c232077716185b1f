// Elementwise broadcasting, reductions, matmul and softmax against hand-computed values.
#include <cmath>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::values;

TEST(Broadcast, BinaryOpsFollowNumPyRules) {
  Tensor a = tensor({{1, 2, 3}, {4, 5, 6}});  // [2,3]
  EXPECT_EQ(values(a + tensor({10, 20, 30})), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(values(a * tensor({2, 3}).reshape({2, 1})), (std::vector<double>{2, 4, 6, 12, 15, 18}));
  EXPECT_EQ(values(a - 1.0), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values(12.0 / tensor({1, 2, 3})), (std::vector<double>{12, 6, 4}));
  Tensor outer = tensor({1, 2}).reshape({2, 1}) * tensor({1, 10, 100});  // [2,1]*[3] -> [2,3]
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(outer), (std::vector<double>{1, 10, 100, 2, 20, 200}));
  Tensor b3 = ones({2, 1, 4}) + ones({3, 1});  // -> [2,3,4]
  EXPECT_EQ(b3.shape(), (Shape{2, 3, 4}));
  EXPECT_THROW(a + ones({2}), ShapeError);
  EXPECT_EQ(values(a.t() + tensor({100, 200})),
            (std::vector<double>{101, 204, 102, 205, 103, 206}));
}

TEST(Elementwise, UnaryFunctions) {
  Tensor x = tensor({-1, 0, 2});
  EXPECT_EQ(values(x.relu()), (std::vector<double>{0, 0, 2}));
  EXPECT_EQ(values(-x), (std::vector<double>{1, 0, -2}));
  EXPECT_EQ(values(abs(x)), (std::vector<double>{1, 0, 2}));
  EXPECT_TRUE(all_close(x.exp(), tensor({std::exp(-1.0), 1.0, std::exp(2.0)})));
  EXPECT_TRUE(all_close(tensor({1, 4}).sqrt(), tensor({1, 2})));
  {
    // Correctly rounded in every element, wherever the run of elements starts: a slice starting
    // one element in gives the same bits (Eigen's own packet sqrt is an estimate for float).
    std::vector<float> xs;
    for (int i = 0; i < 67; ++i) xs.push_back(0.37f + 1.913f * float(i));
    const Tensor x = from_vector(xs, {67});
    const std::vector<float> whole = x.sqrt().to_vector<float>();
    const std::vector<float> tail = x.narrow(0, 1, 66).contiguous().sqrt().to_vector<float>();
    for (int i = 0; i < 67; ++i) {
      EXPECT_EQ(whole[size_t(i)], std::sqrt(xs[size_t(i)])) << i;
      if (i > 0) {
        EXPECT_EQ(tail[size_t(i - 1)], whole[size_t(i)]) << i;
      }
    }
  }
  EXPECT_TRUE(all_close(tensor({1, std::exp(1.0)}).log(), tensor({0, 1})));
  EXPECT_TRUE(
      all_close(x.sigmoid(), tensor({1 / (1 + std::exp(1.0)), 0.5, 1 / (1 + std::exp(-2.0))})));
  EXPECT_TRUE(all_close(x.tanh(), tensor({std::tanh(-1.0), 0, std::tanh(2.0)})));
  EXPECT_TRUE(all_close(x.gelu(), tensor({-0.15865525, 0, 1.9544997})));
  EXPECT_TRUE(all_close(tensor({2, 3}).pow(2), tensor({4, 9})));
  EXPECT_TRUE(all_close(tensor({2, 3}).pow(tensor({3, 2})), tensor({8, 9})));
}

TEST(Elementwise, LargeStridedInputsMatchContiguous) {
  manual_seed(3);
  Tensor a = randn({300, 500}), b = randn({500, 300});
  EXPECT_TRUE(all_close(a + b.t(), a + b.t().contiguous()));
  EXPECT_TRUE(all_close((a.t() * 2.0).t(), a * 2.0));
  EXPECT_TRUE(all_close(a.t().exp().t(), a.exp()));
}

TEST(Compare, ComparisonsAndWhere) {
  Tensor a = tensor({1, 2, 3}), b = tensor({3, 2, 1});
  EXPECT_EQ(a.lt(b).to_vector<bool>(), (std::vector<bool>{true, false, false}));
  EXPECT_EQ(a.eq(b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(ge(a, 2.0).to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(values(where(a.gt(b), a, b)), (std::vector<double>{3, 2, 3}));
  EXPECT_EQ(values(where(gt(a, 1.5), a, zeros({1}))), (std::vector<double>{0, 2, 3}));
  EXPECT_EQ(arange(4).eq(from_vector(std::vector<int64_t>{0, 0, 2, 0}, {4})).to_vector<bool>(),
            (std::vector<bool>{true, false, true, false}));
}

TEST(Reduce, OverDimsWithKeepdim) {
  Tensor a = tensor({{1, 5, 3}, {4, 2, 6}});
  EXPECT_DOUBLE_EQ(a.sum().item(), 21);
  EXPECT_EQ(values(a.sum({0})), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(values(a.sum({1})), (std::vector<double>{9, 12}));
  EXPECT_EQ(a.sum({1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(a.sum({0, 1}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(values(a.mean({0})), (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(values(a.max(1)), (std::vector<double>{5, 6}));
  EXPECT_EQ(values(a.min(0)), (std::vector<double>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(a.max().item(), 6);
  EXPECT_EQ(a.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.argmax(0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(a.argmax().to_vector<int64_t>(), (std::vector<int64_t>{5}));
  EXPECT_EQ(a.t().sum({0}).to_vector<double>(), (std::vector<double>{9, 12}));  // strided input
  Tensor c = arange(0, 24, 1, {.dtype = kFloat64}).reshape({2, 3, 4});
  EXPECT_EQ(values(c.sum({0, 2})), (std::vector<double>{60, 92, 124}));  // middle dim kept
  EXPECT_EQ(ge(tensor({1, 2, 3}), 2.0).sum().to_vector<int64_t>(), (std::vector<int64_t>{2}));
  EXPECT_THROW(a.sum({2}), IndexError);
  EXPECT_THROW(zeros({0}).max(), ShapeError);
  EXPECT_DOUBLE_EQ(zeros({0}).sum().item(), 0);
}

TEST(Reduce, LargeFullSumIsAccurate) {
  Tensor x = ones({1 << 20});
  EXPECT_DOUBLE_EQ(x.sum().item(), double(1 << 20));
  EXPECT_DOUBLE_EQ(x.mean().item(), 1.0);
}

TEST(Matmul, TwoDBatchedAndVectors) {
  Tensor a = tensor({{1, 2}, {3, 4}, {5, 6}});  // [3,2]
  Tensor b = tensor({{1, 0, 2}, {0, 1, 3}});    // [2,3]
  EXPECT_EQ(values(a.matmul(b)), (std::vector<double>{1, 2, 8, 3, 4, 18, 5, 6, 28}));
  EXPECT_EQ(values(b.t().matmul(a.t())), values(a.matmul(b).t()));  // transposed operands
  EXPECT_EQ(values(a.matmul(tensor({1, 1}))), (std::vector<double>{3, 7, 11}));
  EXPECT_DOUBLE_EQ(tensor({1, 2}).matmul(tensor({3, 4})).item(), 11);
  Tensor batch = ones({4, 3, 2});
  Tensor r = batch.matmul(b);  // [4,3,2]·[2,3] broadcasts b
  EXPECT_EQ(r.shape(), (Shape{4, 3, 3}));
  EXPECT_EQ(values(r.select(0, 2).select(0, 0)), (std::vector<double>{1, 1, 5}));
  EXPECT_EQ(ones({2, 1, 3, 4}).matmul(ones({5, 4, 2})).shape(), (Shape{2, 5, 3, 2}));
  EXPECT_THROW(a.matmul(a), ShapeError);
}

TEST(Softmax, StableAndNormalised) {
  Tensor x = tensor({{1, 2, 3}, {1000, 1000, 1000}});
  Tensor s = x.softmax(1);
  EXPECT_TRUE(all_close(s.sum({1}), ones({2})));
  EXPECT_TRUE(all_close(s.select(0, 1), full({3}, 1.0 / 3)));
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_TRUE(
      all_close(s.select(0, 0), tensor({std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z})));
  EXPECT_TRUE(all_close(x.log_softmax(1).exp(), s));
  EXPECT_TRUE(all_close(x.t().softmax(0), s.t()));  // over a non-last dim
  EXPECT_TRUE(std::isfinite(tensor({-1e4, 1e4}).log_softmax(0).sum().item()));
}
