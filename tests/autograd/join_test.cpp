// tests/autograd/join_test.cpp — cat, stack, split and chunk: torch's semantics (uneven pieces,
// fewer chunks than asked), the errors that name both operands, and gradients through the
// pieces. Their backward against finite differences is in the op table (op_table.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <tandem/tandem.h>

#include "support/expect.h"

namespace tandem {
namespace {
using testing::error_message;
using ::testing::HasSubstr;
using testing::values;

std::vector<int64_t> sizes_along(const std::vector<Tensor>& pieces, int64_t d) {
  std::vector<int64_t> out;
  for (const Tensor& p : pieces) out.push_back(p.size(d));
  return out;
}

TEST(Join, ChunkAndSplitCutAsTorchDoes) {
  const Tensor x = arange(7 * 2).view({7, 2});
  EXPECT_EQ(sizes_along(chunk(x, 3, 0), 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes_along(chunk(arange(5), 4, 0), 0), (std::vector<int64_t>{2, 2, 1}));  // 3 < 4
  EXPECT_EQ(sizes_along(chunk(arange(2), 4, 0), 0), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes_along(split(x, 3, 0), 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes_along(split(x, {1, 0, 6}, 0), 0), (std::vector<int64_t>{1, 0, 6}));
  EXPECT_EQ(values(chunk(x, 3, 0)[2]), (std::vector<double>{12, 13}));
  EXPECT_EQ(sizes_along(chunk(x, 2, -1), 1), (std::vector<int64_t>{1, 1}));
}

TEST(Join, CatAndStackJoinInOrder) {
  const Tensor a = tensor({{1, 2}, {3, 4}}), b = tensor({{5, 6}});
  EXPECT_EQ(values(cat({a, b}, 0)), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(cat({a, a}, 1).shape(), (Shape{2, 4}));
  EXPECT_EQ(values(cat({a, a}, -1)), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_EQ(stack({a, a, a}, 0).shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(stack({a, a, a}, 2).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(stack({a, a * 2.0}, 1)), (std::vector<double>{1, 2, 2, 4, 3, 4, 6, 8}));
  // Pieces put back together give the original, also through non-contiguous views.
  const Tensor x = arange(24).view({2, 3, 4}).transpose(0, 2);
  EXPECT_EQ(values(cat(chunk(x, 3, 1), 1)), values(x.contiguous()));
  EXPECT_EQ(values(cat({tensor({1}), empty({0}), tensor({2})}, 0)), (std::vector<double>{1, 2}));
}

TEST(Join, GradientsFlowBackThroughEveryPiece) {
  const Tensor x = arange(6, {.dtype = kFloat64}).view({3, 2}).requires_grad_();
  const std::vector<Tensor> p = chunk(x, 2, 0);  // rows {0, 1} and {2}
  (cat({p[1] * 3.0, p[0]}, 0)).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1, 1, 3, 3}));
  const Tensor a = ones({2}, {.dtype = kFloat64}).requires_grad_();
  const Tensor b = ones({2}, {.dtype = kFloat64});  // needs no gradient
  (stack({a, b}, 0) * tensor({{1, 2}, {3, 4}}, {.dtype = kFloat64})).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{1, 2}));
}

TEST(Join, BadInputNamesTheOperands) {
  EXPECT_THAT(error_message<ShapeError>([] {
                cat({ones({2, 3}), ones({2, 4})}, 0);
              }),
              HasSubstr("tensor 1 has shape [2, 4] but tensor 0 has shape [2, 3]"));
  EXPECT_THAT(error_message<ShapeError>([] {
                cat({ones({2, 3}), ones({3})}, 0);
              }),
              HasSubstr("tensor 1 has shape [3]"));
  EXPECT_THAT(error_message<DTypeError>([] {
                cat({ones({2}), ones({2}, {.dtype = kFloat64})}, 0);
              }),
              HasSubstr("float64"));
  EXPECT_THAT(error_message<DeviceError>([] {
                cat({ones({2}), ones({2}, {.device = Device("cpu:1")})}, 0);
              }),
              HasSubstr("cpu:1"));
  EXPECT_THAT(error_message<ValueError>([] { cat({}, 0); }), HasSubstr("at least one tensor"));
  EXPECT_THAT(error_message<ShapeError>([] {
                stack({ones({2}), ones({3})}, 0);
              }),
              HasSubstr("stack: tensor 1 has shape [3] but tensor 0 has shape [2]"));
  EXPECT_THAT(error_message<ShapeError>([] {
                split(ones({5}), {2, 2}, 0);
              }),
              HasSubstr("sizes add up to 4 but dimension 0 of [5] has size 5"));
  EXPECT_THAT(error_message<ValueError>([] { chunk(ones({5}), 0, 0); }),
              HasSubstr("chunks must be positive"));
  EXPECT_THAT(error_message<IndexError>([] { cat({ones({2})}, 3); }), HasSubstr("cat"));
}

}  // namespace
}  // namespace tandem
