// Views share storage; their strides and values are checked against hand-computed ones.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

namespace {
Tensor grid() { return arange(0, 6, 1, {.dtype = kFloat32}).reshape({2, 3}); }  // [[0,1,2],[3,4,5]]
}  // namespace

TEST(View, TransposeSharesStorageAndPermutesStrides) {
  Tensor a = grid();
  Tensor t = a.t();
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.strides(), (Strides{1, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.impl().storage, a.impl().storage);
  EXPECT_EQ(values(t), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.impl().storage, a.impl().storage);
  EXPECT_TRUE(a.contiguous().is_same(a));  // no copy when already contiguous
}

TEST(View, WritesThroughAViewReachTheBase) {
  Tensor a = zeros({2, 3});
  a.narrow(1, 1, 2).fill_(7);
  EXPECT_EQ(values(a), (std::vector<double>{0, 7, 7, 0, 7, 7}));
  a.select(0, 1).copy_(tensor({1, 2, 3}));
  EXPECT_EQ(values(a), (std::vector<double>{0, 7, 7, 1, 2, 3}));
}

TEST(View, ReshapeIsAViewWhenPossibleAndACopyOtherwise) {
  Tensor a = grid();
  Tensor r = a.reshape({3, 2});
  EXPECT_EQ(r.impl().storage, a.impl().storage);
  EXPECT_EQ(a.view({-1}).shape(), (Shape{6}));
  Tensor t = a.t();  // [3,2] with strides [1,3]: flattening needs a copy
  Tensor f = t.reshape({6});
  EXPECT_NE(f.impl().storage, a.impl().storage);
  EXPECT_EQ(values(f), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(t.view({6}), ShapeError);
  EXPECT_THROW(a.reshape({4, 2}), ShapeError);
  EXPECT_THROW(a.reshape({-1, -1}), ShapeError);
}

TEST(View, NarrowSelectSqueezeUnsqueezeFlattenPermute) {
  Tensor a = arange(0, 24, 1, {.dtype = kFloat32}).reshape({2, 3, 4});
  EXPECT_EQ(values(a.narrow(2, 1, 2).select(0, 1).select(0, 2)), (std::vector<double>{21, 22}));
  EXPECT_EQ(a.narrow(1, -1, 1).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(a.unsqueeze(0).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(a.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(a.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(ones({1, 3, 1}).squeeze().shape(), (Shape{3}));
  EXPECT_EQ(a.squeeze(0).shape(), (Shape{2, 3, 4}));  // size 2: no-op, as PyTorch
  EXPECT_EQ(a.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(a.flatten().shape(), (Shape{24}));
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_DOUBLE_EQ(p.select(0, 3).select(0, 1).select(0, 2).item(), 23);
  EXPECT_THROW(a.permute({0, 0, 1}), IndexError);
  EXPECT_THROW(a.narrow(0, 1, 5), IndexError);
  EXPECT_THROW(a.select(1, 3), IndexError);
  EXPECT_THROW(a.unsqueeze(5), IndexError);
}

TEST(View, ExpandBroadcastsWithZeroStrides) {
  Tensor b = tensor({1, 2, 3});
  Tensor e = b.expand({2, 3});
  EXPECT_EQ(e.strides(), (Strides{0, 1}));
  EXPECT_EQ(values(e), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  Tensor col = tensor({1, 2}).reshape({2, 1});
  EXPECT_EQ(values(col.expand({-1, 3})), (std::vector<double>{1, 1, 1, 2, 2, 2}));
  EXPECT_THROW(b.expand({2, 4}), ShapeError);
}
