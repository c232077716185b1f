// Factories, conversions, element access and printing.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::values;

TEST(Factory, FillsAndShapes) {
  EXPECT_EQ(values(zeros({2, 3})), std::vector<double>(6, 0.0));
  EXPECT_EQ(values(ones({4})), std::vector<double>(4, 1.0));
  EXPECT_EQ(values(full({2}, 2.5)), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(values(arange(5)), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(arange(1, 2, 0.25, {.dtype = kFloat32})),
            (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(3).dtype(), kInt64);
  Tensor t = empty({2, 3, 4}, {.dtype = kFloat64, .device = Device("cpu:2")});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.device(), Device("cpu:2"));
  EXPECT_EQ(t.dtype(), kFloat64);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(scalar_tensor(3).dim(), 0);
}

TEST(Factory, FromInitializerListsAndVectors) {
  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}});
  EXPECT_EQ(m.shape(), (Shape{2, 3}));
  EXPECT_EQ(values(m), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor v = from_vector(std::vector<int64_t>{3, 1, 2}, {3});
  EXPECT_EQ(v.dtype(), kInt64);
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 2}));
  EXPECT_THROW(tensor({{1, 2}, {3}}), ShapeError);
  EXPECT_THROW(from_vector(std::vector<float>{1, 2}, {3}), ShapeError);
}

TEST(Tensor, ConvertsDtypeAndDevice) {
  Tensor a = tensor({1.5, -2.5, 0});
  Tensor i = a.to(kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 0}));
  Tensor b = a.to(kBool);
  EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, true, false}));
  Tensor c = a.to(Device("cpu:1"));
  EXPECT_EQ(c.device(), Device("cpu:1"));
  EXPECT_EQ(values(c), values(a));
  EXPECT_FALSE(c.impl().storage == a.impl().storage);  // a real copy
  EXPECT_TRUE(a.to(Device("cpu")).is_same(a));         // same device: same tensor
  EXPECT_DOUBLE_EQ(tensor({7.0}).item(), 7.0);
  EXPECT_THROW(a.item(), ShapeError);
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(tensor({{1, 2}}).str(), "tensor([[1., 2.]])");
  EXPECT_EQ(tensor({{1, 2}}, {.device = Device("cpu:1")}).str(),
            "tensor([[1., 2.]], device='cpu:1')");
  EXPECT_EQ(tensor({0.5, 0.25}).str(), "tensor([0.5000, 0.2500])");
  EXPECT_EQ(tensor({{1, 2}, {3, 4}}).str(), "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(tensor({1, 0}).to(kBool).str(), "tensor([ True, False])");
  EXPECT_EQ(tensor({1.5}, {.dtype = kFloat64}).str(), "tensor([1.5000], dtype=float64)");
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5000)");
  EXPECT_EQ(tensor({1e-5, 1.0}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(ones({2}).requires_grad_().str(), "tensor([1., 1.], requires_grad=True)");
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], size=(0, 3))");
  const std::string big = arange(2000).str();
  EXPECT_EQ(big, "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])");
  EXPECT_EQ(ones({2, 2, 2}).str(),
            "tensor([[[1., 1.],\n         [1., 1.]],\n\n        [[1., 1.],\n         [1., 1.]]])");
}
