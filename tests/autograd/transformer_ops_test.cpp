// tests/autograd/transformer_ops_test.cpp — layer norm, embedding and GELU's tanh form beyond the
// op table's gradchecks: the fused layer norm against the composed ops (values and gradients,
// float64), its float32 statistics for 16-bit inputs, embedding's ids out of range (named, never
// read) and its padding row, the tanh GELU against its formula, and the modules' parameters.
#include <tandem/nn/nn.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

const TensorOptions kF64{.dtype = kFloat64};

TEST(LayerNorm, MatchesTheComposedOpsInValuesAndGradients) {
  manual_seed(1);
  const Tensor x = randn({3, 4, 6}, kF64).requires_grad_();
  const Tensor w = randn({6}, kF64).requires_grad_(), b = randn({6}, kF64).requires_grad_();
  const Tensor xc = x.detach().requires_grad_(), wc = w.detach().requires_grad_(),
               bc = b.detach().requires_grad_();
  const Tensor fused = layer_norm(x, {6}, w, b, 1e-5);
  const Tensor mu = xc.mean({2}, true);
  const Tensor var = ((xc - mu) * (xc - mu)).mean({2}, true);
  const Tensor composed = (xc - mu) / (var + 1e-5).sqrt() * wc + bc;
  EXPECT_TRUE(all_close(fused, composed, 1e-12, 1e-12));
  const Tensor g = randn({3, 4, 6}, kF64);
  (fused * g).sum().backward();
  (composed * g).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), xc.grad(), 1e-10, 1e-10));
  EXPECT_TRUE(all_close(w.grad(), wc.grad(), 1e-10, 1e-10));
  EXPECT_TRUE(all_close(b.grad(), bc.grad(), 1e-10, 1e-10));
}

// A bfloat16 input keeps float32 statistics: the result is the float32 one, rounded once.
TEST(LayerNorm, SixteenBitInputsUseFloat32Statistics) {
  manual_seed(2);
  const Tensor x32 = randn({5, 64}) * 3.0 + 1.0;
  const Tensor x16 = x32.to(kBFloat16);
  const Tensor y16 = layer_norm(x16, {64});
  EXPECT_EQ(y16.dtype(), kBFloat16);
  const Tensor ref = layer_norm(x16.to(kFloat32), {64}).to(kBFloat16);
  EXPECT_TRUE(all_close(y16.to(kFloat32), ref.to(kFloat32), 0, 0));
}

TEST(LayerNorm, BadShapesAndDtypesAreNamed) {
  const Tensor x = zeros({2, 3});
  EXPECT_THAT(error_message<ShapeError>([&] { layer_norm(x, {4}); }),
              HasSubstr("input [2, 3] does not end in normalized_shape [4]"));
  EXPECT_THAT(error_message<ShapeError>([&] { layer_norm(x, {3}, zeros({2})); }),
              HasSubstr("weight [2] is not normalized_shape [3]"));
  EXPECT_THAT(error_message<DTypeError>([&] { layer_norm(x, {3}, zeros({3}, kF64)); }),
              HasSubstr("layer_norm"));
  EXPECT_THAT(error_message<DTypeError>([&] {
                layer_norm(zeros({2, 3}, {.dtype = kInt64}), {3});
              }),
              HasSubstr("must be floating"));
}

TEST(Embedding, AnIdOutOfRangeIsNamedAndNeverRead) {
  const Tensor table = randn({5, 3});
  const Tensor ids = from_vector(std::vector<int64_t>{0, 2, 7, 1}, {2, 2});
  EXPECT_THAT(error_message<IndexError>([&] { embedding(table, ids); }),
              HasSubstr("embedding: id 7 at position 2 is out of range for a table of 5 rows"));
  EXPECT_THAT(error_message<IndexError>(
                  [&] { embedding(table, from_vector(std::vector<int64_t>{-1}, {1})); }),
              HasSubstr("id -1 at position 0"));
  EXPECT_THAT(error_message<DTypeError>([&] { embedding(table, zeros({2})); }), HasSubstr("ids"));
  EXPECT_THAT(error_message<ShapeError>([&] { embedding(zeros({5}), ids); }),
              HasSubstr("[num_embeddings, embedding_dim]"));
}

// Repeated ids add their rows' gradients; padding_idx's row gets none.
TEST(Embedding, RepeatedIdsAccumulateAndThePaddingRowGetsNoGradient) {
  manual_seed(3);
  const Tensor table = randn({4, 2}, kF64).requires_grad_();
  const Tensor ids = from_vector(std::vector<int64_t>{3, 1, 3, 0}, {4});
  const Tensor y = embedding(table, ids, /*padding_idx=*/0);
  EXPECT_TRUE(all_close(y.select(0, 2), table.detach().select(0, 3), 0, 0));
  const Tensor g = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  (y * g).sum().backward();
  const Tensor expected = from_vector(std::vector<double>{0, 0, 3, 4, 0, 0, 6, 8}, {4, 2});
  EXPECT_TRUE(all_close(table.grad(), expected, 0, 0));
}

TEST(Gelu, TheTanhFormMatchesItsFormulaAndStaysNearTheExactOne) {
  const Tensor x = from_vector(std::vector<double>{-3, -1, -0.5, 0, 0.5, 1, 3}, {7});
  const Tensor got = gelu(x, GeluApproximate::Tanh);
  const double k = std::sqrt(2.0 / M_PI);
  const Tensor want = 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
  EXPECT_TRUE(all_close(got, want, 1e-15, 1e-15));
  EXPECT_TRUE(all_close(got, gelu(x), 1e-3, 0));  // the approximation is within 1e-3
}

TEST(Modules, EmbeddingAndLayerNormAreInitialisedAndNamedAsPyTorch) {
  manual_seed(4);
  nn::Embedding emb(10, 4, {.padding_idx = 2});
  EXPECT_TRUE(all_close(emb.weight.select(0, 2), zeros({4}), 0, 0));
  EXPECT_EQ(emb.str(), "Embedding(10, 4, padding_idx=2)");
  EXPECT_EQ(emb(from_vector(std::vector<int64_t>{1, 2}, {2})).shape(), (Shape{2, 4}));
  nn::LayerNorm ln(4);
  EXPECT_TRUE(all_close(ln.weight, ones({4}), 0, 0));
  EXPECT_TRUE(all_close(ln.bias, zeros({4}), 0, 0));
  EXPECT_EQ(ln.str(), "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");
  std::vector<std::string> names;
  for (auto& [n, t] : ln.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(nn::GELU(GeluApproximate::Tanh).str(), "GELU(approximate='tanh')");
}

}  // namespace
