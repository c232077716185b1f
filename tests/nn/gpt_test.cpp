// The GPT: nanoGPT's parameter names and count, the tied weight as one tensor through every
// module operation and a checkpoint, the attention module against the composed
// matmul–mask–softmax form, parameter gradients against finite differences in float64, and the
// weight-decay groups.
#include <cmath>

#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;
using tandem::testing::error_message;
using tandem::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

nn::GPTConfig tiny(DType dtype = kFloat64) {
  return {.block_size = 6,
          .vocab_size = 7,
          .n_layer = 2,
          .n_head = 2,
          .n_embd = 8,
          .tensor = {.dtype = dtype}};
}

Tensor ids(const std::vector<int64_t>& v, int64_t b, int64_t t) { return from_vector(v, {b, t}); }

bool tied(nn::Sequential& model) {
  return model.at<nn::GPTEmbedding>("transformer")
      .wte.get<nn::Embedding>()
      .weight.is_same(model.at<nn::LMHead>("lm_head").weight);
}

}  // namespace

TEST(GPT, HasNanoGPTsNamesAndCountsTheTiedWeightOnce) {
  nn::Sequential model = nn::gpt(tiny());
  std::vector<std::string> names;
  for (auto& [name, t] : model.named_parameters()) names.push_back(name);
  ASSERT_EQ(names.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(names[0], "transformer.wte.weight");
  EXPECT_EQ(names[1], "transformer.wpe.weight");
  EXPECT_EQ(names[2], "transformer.h.0.ln_1.weight");
  EXPECT_EQ(names[4], "transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(names[13], "transformer.h.0.mlp.c_proj.bias");
  EXPECT_EQ(names.back(), "transformer.ln_f.bias");
  // state_dict() has the tied tensor under both names, as PyTorch's has.
  const nn::StateDict state = model.state_dict();
  EXPECT_EQ(state.back().first, "lm_head.weight");
  EXPECT_TRUE(state.back().second.is_same(state.front().second));
  // nanoGPT's count for this size: wte 7·8 + wpe 6·8 + per layer (2·16 + 8·24+24 + 8·8+8 +
  // 8·32+32 + 32·8+8) + ln_f 16; lm_head adds nothing.
  EXPECT_EQ(model.parameter_count(), 56 + 48 + 2 * (32 + 216 + 72 + 288 + 264) + 16);
}

TEST(GPT, TheTieSurvivesMovesConversionsClonesAndCheckpoints) {
  nn::Sequential model = nn::gpt(tiny(kFloat32));
  model.to(Device::cpu(1));
  EXPECT_TRUE(tied(model));
  EXPECT_EQ(model.at<nn::LMHead>("lm_head").weight.device(), Device::cpu(1));
  model.to(kFloat64);
  EXPECT_TRUE(tied(model));
  nn::Sequential copy = nn::clone(model);
  EXPECT_TRUE(tied(copy));
  EXPECT_FALSE(
      copy.at<nn::LMHead>("lm_head").weight.is_same(model.at<nn::LMHead>("lm_head").weight));

  ScratchDir dir;
  model.to(Device::cpu());
  nn::save_model(dir.file("gpt.safetensors"), model);
  manual_seed(99);
  nn::Sequential loaded = nn::gpt(tiny());
  nn::load_model(dir.file("gpt.safetensors"), loaded);
  EXPECT_TRUE(tied(loaded));
  for (auto& [name, t] : loaded.state_dict())
    for (auto& [name2, u] : model.state_dict())
      if (name == name2) {
        EXPECT_TRUE(all_close(t, u, 0, 0)) << name;
      }
}

TEST(GPT, ForwardShapesAndClearErrors) {
  nn::Sequential model = nn::gpt(tiny());
  const Tensor logits = model(ids({0, 1, 2, 3, 4, 5}, 2, 3));
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 7}));
  EXPECT_THAT(error_message<ShapeError>([&] {
                model(ids({0, 1, 2, 3, 4, 5, 6}, 1, 7));
              }),
              HasSubstr("a sequence of 7 tokens is longer than the block size 6"));
  EXPECT_THAT(error_message<IndexError>([&] { model(ids({0, 9}, 1, 2)); }), HasSubstr("9"));
  EXPECT_THAT(error_message<ValueError>([] {
                nn::gpt({.block_size = 4, .vocab_size = 5, .n_layer = 1, .n_head = 3, .n_embd = 8});
              }),
              HasSubstr("n_embd 8 must split evenly into n_head 3 heads"));
}

TEST(GPT, CausalSelfAttentionMatchesTheComposedForm) {
  manual_seed(3);
  nn::GPTConfig c = tiny();
  nn::CausalSelfAttention attn(c);
  const Tensor x = randn({2, 5, 8}, {.dtype = kFloat64});
  // The oracle: scores, a lower-triangular mask, softmax, weighted values, per head.
  const Tensor qkv = attn.c_attn(x);
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * 8, 8).reshape({2, 5, 2, 4}).transpose(1, 2);
  };
  Tensor scores = matmul(heads(0), heads(1).transpose(-2, -1)) * (1.0 / std::sqrt(4.0));
  const Tensor ones_tt = ones({5, 5}, {.dtype = kFloat64});
  scores = where(tril(ones_tt).gt(0.5), scores, full({}, -INFINITY, {.dtype = kFloat64}));
  const Tensor y = matmul(softmax(scores, -1), heads(2)).transpose(1, 2).reshape({2, 5, 8});
  EXPECT_TRUE(all_close(attn(x), attn.c_proj(y), 1e-13, 1e-12));
}

// Every parameter's gradient (the tied one summed over both uses) against central differences.
TEST(GPT, ParameterGradientsMatchFiniteDifferencesInFloat64) {
  manual_seed(4);
  nn::GPTConfig c = tiny();
  c.n_layer = 1;
  nn::Sequential model = nn::gpt(c);
  const Tensor x = ids({1, 2, 3, 4, 5, 6, 0, 2}, 2, 4), y = ids({2, 3, 4, 5, 6, 0, 2, 1}, 2, 4);
  auto loss = [&] { return nn::gpt_loss(model(x), y); };
  model.zero_grad();
  loss().backward();
  const double h = 1e-6;
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor grad = p.grad();
    ASSERT_TRUE(grad.defined()) << name;
    std::vector<double> analytic = grad.to_vector<double>();
    Tensor flat = p.detach().view({-1});
    for (int64_t i = 0; i < flat.numel(); i += 3) {  // every third element keeps it quick
      NoGradGuard no_grad;
      Tensor element = flat.narrow(0, i, 1);  // fill_ bumps the version: no stale weight cache
      const double v = element.item();
      element.fill_(v + h);
      const double up = loss().item();
      element.fill_(v - h);
      const double down = loss().item();
      element.fill_(v);
      EXPECT_NEAR(analytic[size_t(i)], (up - down) / (2 * h), 1e-7) << name << " [" << i << "]";
    }
  }
}

TEST(GPT, WeightDecayGoesToMatricesOnly) {
  nn::Sequential model = nn::gpt(tiny());
  const optim::DecayGroups groups = optim::weight_decay_groups(model.named_parameters());
  // wte (tied, once), wpe, and per layer c_attn, attn.c_proj, c_fc, mlp.c_proj.
  EXPECT_EQ(groups.decay.size(), 2u + 2 * 4);
  EXPECT_EQ(groups.no_decay.size(), 2u * 8 + 2);
  const auto adamw = optim::adamw_groups(model.named_parameters(), {.weight_decay = 0.1});
  ASSERT_EQ(adamw.size(), 2u);
  EXPECT_EQ(adamw[0].options.weight_decay, 0.1);
  EXPECT_EQ(adamw[1].options.weight_decay, 0.0);
  std::vector<size_t> sizes{adamw[0].params.size(), adamw[1].params.size()};
  EXPECT_THAT(sizes, ElementsAre(10u, 18u));
}
