// tests/autograd/attention_packed_test.cpp — scaled_dot_product_attention_packed: the output and
// the gradient of qkv equal, bit for bit, the three-view form's (narrow, view, transpose, then
// scaled_dot_product_attention) with the fused backend and with the composed one, causal or not,
// with dropout from the same counters, in float64 and float32; the fused backward against finite
// differences; a clear error for a qkv that does not split into the heads; the same on cuda:0
// against the CPU (skipped visibly without a GPU).
#include <tandem/autograd/gradcheck.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace attention_packed_test {

constexpr int64_t kB = 2, kT = 7, kHeads = 3, kD = 4, kC = kHeads * kD;

// The three-view form the GPT used before the packed op: each third of qkv into heads.
Tensor three_views(const Tensor& qkv, const AttentionOptions& o) {
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * kC, kC).view({kB, kT, kHeads, kD}).transpose(1, 2);
  };
  return scaled_dot_product_attention(heads(0), heads(1), heads(2), o);
}

// Output and the gradient of qkv for an upstream gradient dy, the dropout counters from seed 5.
std::pair<Tensor, Tensor> run(bool packed, const Tensor& qkv0, const Tensor& dy,
                              const AttentionOptions& o) {
  const Tensor qkv = qkv0.clone().requires_grad_();
  manual_seed(5);
  const Tensor y =
      packed ? scaled_dot_product_attention_packed(qkv, kHeads, o) : three_views(qkv, o);
  y.backward(dy);
  return {y.detach(), qkv.grad()};
}

struct Variant {
  const char* name;
  AttentionOptions options;
};

std::vector<Variant> variants() {
  return {{"fused", {.backend = AttentionBackend::Fused}},
          {"fused causal", {.causal = true, .backend = AttentionBackend::Fused}},
          {"fused causal dropout",
           {.causal = true, .dropout_p = 0.3, .backend = AttentionBackend::Fused}},
          {"math causal", {.causal = true, .backend = AttentionBackend::Math}},
          {"auto causal", {.causal = true}}};
}

TEST(AttentionPacked, EqualsTheThreeViewFormBitForBit) {
  for (DType dtype : {kFloat64, kFloat32}) {
    manual_seed(1);
    const Tensor qkv = randn({kB, kT, 3 * kC}, {.dtype = dtype});
    const Tensor dy = randn({kB, kHeads, kT, kD}, {.dtype = dtype});
    for (const Variant& v : variants()) {
      const auto [y_packed, g_packed] = run(true, qkv, dy, v.options);
      const auto [y_views, g_views] = run(false, qkv, dy, v.options);
      EXPECT_EQ(y_packed.shape(), (Shape{kB, kHeads, kT, kD})) << v.name;
      EXPECT_TRUE(all_close(y_packed, y_views, 0, 0)) << v.name << " " << name(dtype);
      EXPECT_TRUE(all_close(g_packed, g_views, 0, 0)) << v.name << " " << name(dtype);
    }
  }
}

TEST(AttentionPacked, FusedBackwardMatchesFiniteDifferences) {
  manual_seed(2);
  const Tensor qkv = randn({1, 4, 3 * 2 * 3}, {.dtype = kFloat64}).requires_grad_();
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) {
        return scaled_dot_product_attention_packed(
            x[0], 2, {.causal = true, .backend = AttentionBackend::Fused});
      },
      {qkv});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(AttentionPacked, AQkvThatDoesNotSplitIntoTheHeadsIsAShapeError) {
  const Tensor qkv = zeros({2, 5, 10});
  EXPECT_THAT(error_message<ShapeError>([&] { scaled_dot_product_attention_packed(qkv, 2); }),
              HasSubstr("qkv [2, 5, 10] must be [B, T, 3 * n_head * D] for n_head 2"));
  EXPECT_THAT(error_message<ShapeError>([&] {
                scaled_dot_product_attention_packed(zeros({5, 12}), 2);
              }),
              HasSubstr("qkv [5, 12]"));
}

TEST(AttentionPacked, OnCuda0MatchesTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount = 0)";
  manual_seed(3);
  const Tensor qkv = randn({kB, kT, 3 * kC});
  const Tensor dy = randn({kB, kHeads, kT, kD});
  const AttentionOptions o{.causal = true, .backend = AttentionBackend::Fused};
  const auto [y_cpu, g_cpu] = run(true, qkv, dy, o);
  const auto [y_gpu, g_gpu] = run(true, qkv.to(Device::cuda(0)), dy.to(Device::cuda(0)), o);
  EXPECT_TRUE(all_close(y_gpu.to(Device::cpu()), y_cpu, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(g_gpu.to(Device::cpu()), g_cpu, 1e-5, 1e-5));
}

}  // namespace attention_packed_test
