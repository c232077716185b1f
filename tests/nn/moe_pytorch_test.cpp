// nn::MoE and a GPT with one against PyTorch (tests/fixtures/moe-pytorch: the same spec written
// the PyTorch way, in float64): the layer's output, auxiliary loss, drops and every gradient for
// Switch's gates (with drops), Mixtral's (dropless) and Mixtral's capped; the GPT's loss and
// gradients, and its parameters after three AdamW steps with the auxiliary losses and clipping.
#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;

namespace {

constexpr double kMoERtol = 1e-10, kMoEAtol = 1e-13;

const SafetensorsFile& fixture() {
  static const SafetensorsFile file =
      load_safetensors(TANDEM_TEST_FIXTURES "/moe-pytorch/moe.safetensors");
  return file;
}

nn::StateDict with_prefix(const std::string& prefix) {
  nn::StateDict out;
  for (auto& [name, t] : fixture().tensors)
    if (name.starts_with(prefix)) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

void check_layer(const std::string& c, nn::MoEOptions o) {
  const SafetensorsFile& f = fixture();
  nn::MoE layer({.n_embd = 16, .moe = o, .tensor = {.dtype = kFloat64}});
  layer.load_state_dict(with_prefix(c + ".weight."));
  const Tensor x = f.at(c + ".x").clone().requires_grad_();
  const Tensor y = layer(x);
  EXPECT_TRUE(all_close(y, f.at(c + ".y"), kMoEAtol, kMoERtol));
  EXPECT_TRUE(all_close(layer.aux_loss.reshape({1}), f.at(c + ".aux"), kMoEAtol, kMoERtol));
  EXPECT_EQ(layer.dropped, f.at(c + ".dropped").to_vector<int64_t>()[0]);
  (sum(y * f.at(c + ".w")) + layer.aux_loss).backward();
  EXPECT_TRUE(all_close(x.grad(), f.at(c + ".grad.x"), kMoEAtol, kMoERtol));
  for (auto& [name, p] : layer.named_parameters())
    EXPECT_TRUE(all_close(p.grad(), f.at(c + ".grad." + name), kMoEAtol, kMoERtol))
        << c << " " << name;
}

nn::Sequential fixture_gpt() {
  nn::Sequential model = nn::gpt({.block_size = 8,
                                  .vocab_size = 11,
                                  .n_layer = 2,
                                  .n_head = 2,
                                  .n_embd = 16,
                                  .moe_every = 2,
                                  .moe = {.n_experts = 4, .top_k = 2, .capacity_factor = 1.0},
                                  .tensor = {.dtype = kFloat64}});
  model.load_state_dict(with_prefix("gpt.weight."));  // strict: the names are PyTorch's
  return model;
}

Tensor batch(const char* name, int64_t step) { return fixture().at(name).select(0, step); }

}  // namespace

TEST(MoEMatchesPyTorch, SwitchGatesWithDrops) {
  check_layer(
      "switch",
      {.n_experts = 4, .top_k = 1, .gating = nn::Gating::SoftmaxTopK, .capacity_factor = 1.25});
}
TEST(MoEMatchesPyTorch, MixtralGatesDropless) {
  check_layer("mixtral", {.n_experts = 4, .top_k = 2, .gating = nn::Gating::TopKSoftmax});
}
TEST(MoEMatchesPyTorch, MixtralGatesCapped) {
  check_layer("capped", {.n_experts = 4, .top_k = 2, .capacity_factor = 0.75});
}

TEST(MoEMatchesPyTorch, GPTLossAndEveryGradient) {
  nn::Sequential model = fixture_gpt();
  const Tensor logits = model(batch("gpt.x", 0));  // before moe_aux_loss, which reads its forward
  const Tensor loss = nn::gpt_loss(logits, batch("gpt.y", 0)) + nn::moe_aux_loss(model);
  EXPECT_TRUE(all_close(loss.reshape({1}), fixture().at("gpt.loss"), kMoEAtol, kMoERtol));
  EXPECT_TRUE(
      all_close(nn::moe_aux_loss(model).reshape({1}), fixture().at("gpt.aux"), kMoEAtol, kMoERtol));
  EXPECT_EQ(nn::moe_layers(model)[0].second->dropped,
            fixture().at("gpt.dropped").to_vector<int64_t>()[0]);
  loss.backward();
  for (auto& [name, p] : model.named_parameters())
    EXPECT_TRUE(all_close(p.grad(), fixture().at("gpt.grad." + name), kMoEAtol, kMoERtol)) << name;
}

TEST(MoEMatchesPyTorch, GPTThreeAdamWStepsWithTheAuxiliaryLossesAndClipping) {
  nn::Sequential model = fixture_gpt();
  optim::AdamW opt(optim::adamw_groups(
      model.named_parameters(), {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}));
  const std::vector<double> want = fixture().at("gpt.grad_norms").to_vector<double>();
  for (int64_t s = 0; s < 3; ++s) {
    opt.zero_grad();
    const Tensor logits = model(batch("gpt.x", s));
    (nn::gpt_loss(logits, batch("gpt.y", s)) + nn::moe_aux_loss(model)).backward();
    const double norm = optim::clip_grad_norm_(model.parameters(), 1.0);
    EXPECT_NEAR(norm, want[size_t(s)], kMoERtol * want[size_t(s)]) << "step " << s;
    opt.step();
  }
  for (auto& [name, t] : model.state_dict())
    EXPECT_TRUE(all_close(t, fixture().at("gpt.after." + name), kMoEAtol, kMoERtol)) << name;
}
