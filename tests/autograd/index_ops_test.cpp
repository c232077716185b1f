// tests/autograd/index_ops_test.cpp — gather (and its scatter-add gradient), topk, multinomial,
// tril and triu: values against plain loops, gradients where they flow, the generator's counters
// (the same seed draws the same samples, on any thread split), and errors that name the index,
// the row or the shape.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

TEST(Gather, PicksAlongADimAndItsGradientAddsBack) {
  const Tensor x = tensor({{1, 2, 3}, {4, 5, 6}}, {.dtype = kFloat64}).requires_grad_();
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 1, 1, 1}, {2, 3});
  const Tensor y = gather(x, 1, idx);
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{3, 1, 3, 5, 5, 5}));
  y.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 2, 0, 3, 0}));
  // Along dim 0.
  const Tensor y0 = gather(x.detach(), 0, from_vector(std::vector<int64_t>{1, 0, 1}, {1, 3}));
  EXPECT_EQ(y0.to_vector<double>(), (std::vector<double>{4, 2, 6}));
  EXPECT_THAT(error_message<IndexError>([&] {
                gather(x, 1, from_vector(std::vector<int64_t>{0, 3, 0, 0, 0, 0}, {2, 3}));
              }),
              HasSubstr("gather: index 3 at position 1 is out of range for a dim of size 3"));
  EXPECT_THAT(error_message<ShapeError>([&] { gather(x, 1, idx.narrow(0, 0, 1).reshape({3})); }),
              HasSubstr("gather: index [3] must have input [2, 3]"));
}

TEST(TopK, TheLargestInOrderTiesToTheLowerIndexAndAGradientBack) {
  const Tensor x = tensor({{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}}, {.dtype = kFloat64}).requires_grad_();
  auto [v, i] = topk(x, 3);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{5, 4, 3, 9, 6, 5}));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 2, 0, 0, 2, 3}));
  v.sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 1, 0, 1, 1, 0, 1, 1, 0}));
  auto [s, si] = topk(x.detach(), 2, 1, /*largest=*/false);
  EXPECT_EQ(si.to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 1, 4}));  // the 1s: lower first
  auto [c, ci] = topk(x.detach(), 1, 0);
  EXPECT_EQ(ci.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1, 0}));
  EXPECT_THAT(error_message<ValueError>([&] { topk(x, 6); }), HasSubstr("topk: k = 6"));
}

TEST(Multinomial, DrawsAsTheWeightsSayAndTheSameSeedDrawsTheSame) {
  const Tensor p = tensor({{0.0, 1.0, 0.0, 3.0}, {1.0, 1.0, 1.0, 1.0}});
  manual_seed(5);
  const Tensor a = multinomial(p, 4000, /*replacement=*/true);
  manual_seed(5);
  const Tensor b = multinomial(p, 4000, true);
  EXPECT_EQ(a.to_vector<int64_t>(), b.to_vector<int64_t>());
  std::vector<int64_t> counts(8, 0);
  const std::vector<int64_t> v = a.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) ++counts[size_t((i / 4000) * 4 + size_t(v[i]))];
  EXPECT_EQ(counts[0], 0);  // weight 0 is never drawn
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(double(counts[3]) / 4000, 0.75, 0.03);
  for (int c = 4; c < 8; ++c) EXPECT_NEAR(double(counts[size_t(c)]) / 4000, 0.25, 0.03);
  // Without replacement every nonzero category comes once.
  manual_seed(6);
  std::vector<int64_t> all = multinomial(tensor({1.0, 2.0, 3.0}), 3).to_vector<int64_t>();
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_THAT(error_message<ValueError>([&] {
                multinomial(tensor({1.0, -1.0}), 1);
              }),
              HasSubstr("row 0 has -1 at 1"));
  EXPECT_THAT(error_message<ValueError>([&] {
                multinomial(tensor({{1.0, 1.0}, {0.0, 0.0}}), 1);
              }),
              HasSubstr("row 1 sums to 0"));
  EXPECT_THAT(error_message<ValueError>([&] {
                multinomial(tensor({1.0, 0.0}), 2);
              }),
              HasSubstr("has 1 categories of nonzero probability"));
}

TEST(Tril, KeepsOneSideOfTheDiagonalAndPassesTheGradientThere) {
  const Tensor x = ones({2, 3, 4}, {.dtype = kFloat64}).requires_grad_();
  const Tensor lower = tril(x);
  EXPECT_EQ(lower.select(0, 1).to_vector<double>(),
            (std::vector<double>{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(triu(x.detach(), 1).select(0, 0).to_vector<double>(),
            (std::vector<double>{0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}));
  lower.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), tril(ones({2, 3, 4}, {.dtype = kFloat64})), 0, 0));
}

}  // namespace
