// tests/autograd/attention_test.cpp — the fused scaled_dot_product_attention against the composed
// matmul–mask–softmax–dropout–matmul form (the oracle), in float64: values and all three
// gradients, for one tile and several (T past the 64-row tiles, causal and not), bool and float
// masks, per batch entry or shared, dropout drawn from the same counters as rand(); what the graph
// keeps grows with T, not T²; a row that sees no key gives zeros, not NaN; bad input is named.
#include <tandem/core/memory_stats.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

const TensorOptions kF64{.dtype = kFloat64};

// The oracle: every step a separate op, the Tq×Tk scores and probabilities materialised.
Tensor composed(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(q.size(-1))));
  Tensor s = q.matmul(k.transpose(-2, -1)) * scale;
  if (o.causal) {
    std::vector<double> bias(size_t(tq * tk));
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = i + 1; j < tk; ++j)
        bias[size_t(i * tk + j)] = -std::numeric_limits<double>::infinity();
    s = s + from_vector(bias, {tq, tk}).to(s.dtype());
  }
  if (o.attn_mask.defined()) {
    s = o.attn_mask.dtype() == kBool
            ? where(o.attn_mask, s, full({}, -std::numeric_limits<double>::infinity(), s.options()))
            : s + o.attn_mask;
  }
  Tensor p = s.softmax(-1);
  if (o.dropout_p > 0) {
    const Tensor keep = rand(p.shape(), p.options()).ge(o.dropout_p).to(p.dtype());
    p = p * keep * (1.0 / (1.0 - o.dropout_p));
  }
  return p.matmul(v);
}

struct Inputs {
  Tensor q, k, v;
};
Inputs draw(const Shape& qs, const Shape& ks, const Shape& vs, uint64_t seed) {
  manual_seed(seed);
  return {randn(qs, kF64), randn(ks, kF64), randn(vs, kF64)};
}

// Fused against composed: the output and the gradients of q, k and v for a random dy.
void expect_matches(const Inputs& in, const AttentionOptions& o, double tol = 1e-11) {
  auto run = [&](bool fused, uint64_t seed) {
    const Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
                 v = in.v.detach().requires_grad_();
    manual_seed(seed);  // dropout draws from the same counters either way
    const Tensor y = fused ? scaled_dot_product_attention(q, k, v, o) : composed(q, k, v, o);
    manual_seed(99);
    (y * randn(y.shape(), kF64)).sum().backward();
    return std::vector<Tensor>{y, q.grad(), k.grad(), v.grad()};
  };
  const auto got = run(true, 7), want = run(false, 7);
  const char* what[] = {"output", "dq", "dk", "dv"};
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(all_close(got[i], want[i], tol, tol)) << what[i];
}

TEST(Attention, MatchesTheComposedFormInOneTile) {
  expect_matches(draw({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}, 1), {});
  expect_matches(draw({2, 3, 6, 8}, {2, 3, 6, 8}, {2, 3, 6, 8}, 2), {.causal = true});
  expect_matches(draw({4, 5, 3}, {4, 5, 3}, {4, 5, 3}, 3), {.scale = 0.3});
}

TEST(Attention, MatchesTheComposedFormAcrossTiles) {
  // 130 rows: three 64-row tiles, the last of 2; causal tiles on, past and under the diagonal.
  expect_matches(draw({2, 130, 16}, {2, 130, 16}, {2, 130, 8}, 4), {}, 1e-10);
  expect_matches(draw({2, 130, 16}, {2, 130, 16}, {2, 130, 8}, 5), {.causal = true}, 1e-10);
  expect_matches(draw({1, 70, 8}, {1, 150, 8}, {1, 150, 8}, 6), {.causal = true}, 1e-10);
}

// A random bool mask in which every query may attend key 0 (a row that sees no key is its own
// test).
Tensor bool_mask(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  const std::vector<double> r = rand(shape).to_vector<double>();
  std::vector<bool> m(r.size());
  const int64_t tk = shape.back();
  for (size_t i = 0; i < r.size(); ++i) m[i] = r[i] > 0.3 || int64_t(i) % tk == 0;
  return from_vector(m, shape);
}

TEST(Attention, BoolAndFloatMasksSharedOrPerBatchEntry) {
  const Inputs in = draw({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, 9);
  expect_matches(in, {.attn_mask = bool_mask({5, 7}, 8)});         // shared
  expect_matches(in, {.attn_mask = bool_mask({2, 1, 5, 7}, 10)});  // per batch entry
  manual_seed(11);
  expect_matches(in, {.attn_mask = randn({5, 7}, kF64)});  // added to the scores
}

TEST(Attention, DropoutDrawsWhatRandWouldAndMatches) {
  expect_matches(draw({2, 9, 4}, {2, 11, 4}, {2, 11, 5}, 10), {.dropout_p = 0.3});
  expect_matches(draw({1, 70, 4}, {1, 70, 4}, {1, 70, 4}, 11), {.causal = true, .dropout_p = 0.2},
                 1e-10);
}

// The Math backend (separate ops, what Auto takes on CUDA) against the same oracle, dropout too;
// and the fused op named explicitly is the one Auto takes on the CPU.
TEST(Attention, TheMathBackendMatchesToo) {
  for (AttentionBackend backend : {AttentionBackend::Math, AttentionBackend::Fused}) {
    expect_matches(draw({2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 4}, 1), {.backend = backend});
    expect_matches(draw({2, 130, 16}, {2, 130, 16}, {2, 130, 8}, 5),
                   {.causal = true, .backend = backend}, 1e-10);
    expect_matches(draw({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}, 9),
                   {.attn_mask = bool_mask({2, 1, 5, 7}, 10), .backend = backend});
    expect_matches(draw({1, 70, 4}, {1, 70, 4}, {1, 70, 4}, 11),
                   {.causal = true, .dropout_p = 0.2, .backend = backend}, 1e-10);
  }
}

// Heads cut out of one [B, T, H, D] tensor, as the GPT does: strided views, both backends.
TEST(Attention, BothBackendsTakeStridedHeads) {
  manual_seed(13);
  const Tensor x = randn({2, 6, 3, 4}, kF64);
  auto run = [&](AttentionBackend backend) {
    const Tensor leaf = x.detach().requires_grad_();
    const Tensor h = leaf.transpose(1, 2);  // [2, 3, 6, 4], not contiguous
    const Tensor y =
        scaled_dot_product_attention(h, h * 0.5, h, {.causal = true, .backend = backend});
    manual_seed(5);
    (y * randn(y.shape(), kF64)).sum().backward();
    return std::pair{y, leaf.grad()};
  };
  const auto [y_math, g_math] = run(AttentionBackend::Math);
  const auto [y_fused, g_fused] = run(AttentionBackend::Fused);
  EXPECT_TRUE(all_close(y_math, y_fused, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(g_math, g_fused, 1e-12, 1e-12));
}

// What the graph holds after the forward grows with T: q, k, v, the output and T log-sum-exps,
// not the T×T probabilities the composed form keeps.
TEST(Attention, TheGraphKeepsNoTByTMatrix) {
  const int64_t t = 1024, d = 16;
  const Inputs in = draw({1, t, d}, {1, t, d}, {1, t, d}, 12);
  auto held = [&](bool fused) {
    const Tensor q = in.q.detach().requires_grad_(), k = in.k.detach().requires_grad_(),
                 v = in.v.detach().requires_grad_();
    const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
    const Tensor y = fused ? scaled_dot_product_attention(q, k, v, {.causal = true})
                           : composed(q, k, v, {.causal = true});
    return memory_stats(Device::cpu()).allocated_bytes - before;
  };
  const int64_t fused = held(true), plain = held(false);
  EXPECT_LT(fused, t * t * 8 / 8) << "the fused op holds " << fused << " bytes";
  EXPECT_GT(plain, t * t * 8) << "the composed form holds the probabilities";
}

TEST(Attention, ARowThatSeesNoKeyGivesZerosNotNaN) {
  const Inputs in = draw({1, 3, 4}, {1, 5, 4}, {1, 5, 2}, 13);
  const Tensor q = in.q.detach().requires_grad_();
  Tensor mask = from_vector(std::vector<bool>{true, true, false, false, false,    //
                                              false, false, false, false, false,  // row 1: none
                                              false, true, true, true, true},
                            {3, 5});
  const Tensor y = scaled_dot_product_attention(q, in.k, in.v, {.attn_mask = mask});
  EXPECT_TRUE(all_close(y.select(1, 1), zeros({1, 2}, kF64), 0, 0));
  y.sum().backward();
  EXPECT_TRUE(all_close(q.grad().select(1, 1), zeros({1, 4}, kF64), 0, 0));
  const Tensor ok = composed(in.q, in.k, in.v, {.attn_mask = mask});
  EXPECT_TRUE(all_close(y.select(1, 0), ok.select(1, 0), 1e-12, 1e-12));
}

TEST(Attention, BadInputIsNamed) {
  const Tensor q = zeros({2, 5, 4}), k = zeros({2, 6, 4}), v = zeros({2, 6, 3});
  EXPECT_THAT(error_message<ShapeError>([&] {
                scaled_dot_product_attention(q, zeros({2, 6, 5}), v);
              }),
              HasSubstr("query and key the same head dim"));
  EXPECT_THAT(error_message<ShapeError>([&] {
                scaled_dot_product_attention(q, k, zeros({2, 7, 3}));
              }),
              HasSubstr("key and value the same length"));
  EXPECT_THAT(error_message<ShapeError>([&] { scaled_dot_product_attention(zeros({4}), k, v); }),
              HasSubstr("[..., T, D]"));
  EXPECT_THAT(
      error_message<ValueError>([&] { scaled_dot_product_attention(q, k, v, {.dropout_p = 1.0}); }),
      HasSubstr("dropout_p must be in [0, 1)"));
  EXPECT_THAT(error_message<ValueError>([&] {
                scaled_dot_product_attention(q, k, v, {.attn_mask = zeros({5, 6}), .causal = true});
              }),
              HasSubstr("causal or attn_mask, not both"));
  EXPECT_THAT(error_message<ShapeError>([&] {
                scaled_dot_product_attention(q, k, v, {.attn_mask = zeros({5, 7})});
              }),
              HasSubstr("attn_mask [5, 7] does not broadcast to [2, 5, 6]"));
  EXPECT_THAT(
      error_message<DTypeError>([&] { scaled_dot_product_attention(q, k, v.to(kFloat64)); }),
      HasSubstr("value"));
}

}  // namespace
