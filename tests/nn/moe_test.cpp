// nn::MoE: its backward against finite differences in float64 (Switch's gates with drops,
// Mixtral's dropless, Mixtral's capped), the routing group's drops matching one device's batch,
// the statistics, and bad input.
#include <numeric>
#include <random>
#include <set>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

Tensor random_ids(int64_t b, int64_t t, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < b * t; ++i) ids.push_back(int64_t(gen() % 11));
  return from_vector(ids, {b, t});
}

nn::GPTConfig moe_config(nn::MoEOptions moe, int64_t width = 8) {
  return {.n_layer = 1, .n_head = 2, .n_embd = width, .moe = moe, .tensor = {.dtype = kFloat64}};
}

nn::MoEOptions switch_options() {
  return {.n_experts = 4, .top_k = 1, .gating = nn::Gating::SoftmaxTopK, .capacity_factor = 1.25};
}
nn::MoEOptions mixtral_options() {
  return {.n_experts = 4, .top_k = 2, .gating = nn::Gating::TopKSoftmax};
}
nn::MoEOptions capped_options() {
  nn::MoEOptions o = mixtral_options();
  o.capacity_factor = 0.75;
  return o;
}

// Σ y·w + the auxiliary loss, as a function of x and every parameter of `layer`.
void check_gradients(const nn::MoEOptions& options, int64_t want_dropped_at_least) {
  manual_seed(5);
  nn::MoE layer(moe_config(options));
  const Tensor x = randn({2, 6, 8}, {.dtype = kFloat64}).requires_grad_();
  const Tensor w = randn({2, 6, 8}, {.dtype = kFloat64});
  std::vector<Tensor*> fields = {&layer.router.weight, &layer.experts.c_fc.weight,
                                 &layer.experts.c_fc.bias, &layer.experts.c_proj.weight,
                                 &layer.experts.c_proj.bias};
  std::vector<Tensor> inputs = {x};
  for (Tensor* f : fields) inputs.push_back(*f);
  const auto fn = [&](const std::vector<Tensor>& in) {
    for (size_t i = 0; i < fields.size(); ++i) *fields[i] = in[i + 1];
    const Tensor y = layer(in[0]);
    return (sum(y * w) + layer.aux_loss).reshape({1});
  };
  fn(inputs);
  EXPECT_GE(layer.dropped, want_dropped_at_least);  // the capacity bites where it should
  const GradcheckResult r = gradcheck(fn, inputs, {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5});
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace

TEST(MoE, SwitchGatesWithDropsMatchFiniteDifferences) { check_gradients(switch_options(), 1); }
TEST(MoE, MixtralDroplessMatchesFiniteDifferences) { check_gradients(mixtral_options(), 0); }
TEST(MoE, MixtralCappedMatchesFiniteDifferences) { check_gradients(capped_options(), 1); }

TEST(MoE, CountsEveryChoiceAndDropsPastTheCapacity) {
  manual_seed(6);
  nn::MoE layer(moe_config(capped_options()));
  const Tensor x = randn({3, 8, 8}, {.dtype = kFloat64});
  layer(x);
  const auto& per = layer.tokens_per_expert;
  EXPECT_EQ(std::accumulate(per.begin(), per.end(), int64_t(0)), 3 * 8 * 2);
  const int64_t capacity = 9;  // ceil(0.75 · 24 · 2 / 4)
  int64_t over = 0;
  for (int64_t n : per) over += std::max<int64_t>(0, n - capacity);
  EXPECT_EQ(layer.dropped, over);
}

// Two ranks each holding half the batch's rows, their counts shared, keep exactly the choices
// one device keeps of the whole batch: the drops do not depend on the layout.
TEST(MoE, ARoutingGroupKeepsWhatOneDeviceKeeps) {
  const nn::MoEOptions o = capped_options();
  const int64_t n = 12, k = o.top_k, E = o.n_experts;
  manual_seed(8);
  std::vector<int64_t> experts;  // k distinct experts per token
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<int64_t> perm = argmax(rand({E, E}), 0).to_vector<int64_t>();
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::rotate(order.begin(), order.begin() + perm[0], order.end());
    for (int64_t j = 0; j < k; ++j) experts.push_back(order[size_t(j)]);
  }
  const nn::Assignment whole = nn::assign(experts, n, o);
  ASSERT_GT(whole.dropped, 0);
  const auto kept = [&](const nn::Assignment& a, int64_t first_token) {
    std::set<std::pair<int64_t, int64_t>> out;  // (token, choice)
    for (int64_t c = 0; c < int64_t(a.slots.size()); ++c)
      if (a.slots[size_t(c)] < int64_t(a.tokens.size())) out.insert({first_token + c / k, c % k});
    return out;
  };
  std::vector<std::vector<int64_t>> halves = {{experts.begin(), experts.begin() + n},
                                              {experts.begin() + n, experts.end()}};
  std::vector<int64_t> all;  // both ranks' counts [2][k][E]
  for (const auto& h : halves) {
    std::vector<int64_t> local(size_t(k * E), 0);
    for (int64_t c = 0; c < int64_t(h.size()); ++c) ++local[size_t((c % k) * E + h[size_t(c)])];
    all.insert(all.end(), local.begin(), local.end());
  }
  std::set<std::pair<int64_t, int64_t>> split;
  int64_t dropped = -1;
  for (int64_t r = 0; r < 2; ++r) {
    const nn::Assignment a =
        nn::assign(halves[size_t(r)], n / 2, o, [&](const std::vector<int64_t>&) {
          return nn::RoutingCounts{all, r};
        });
    for (const auto& p : kept(a, r * n / 2)) split.insert(p);
    EXPECT_EQ(a.capacity, whole.capacity);
    EXPECT_EQ(a.routed, whole.routed);
    dropped = a.dropped;
  }
  EXPECT_EQ(split, kept(whole, 0));
  EXPECT_EQ(dropped, whole.dropped);
}

TEST(MoE, ABlockEveryMoeEveryBlocksKeepsOneDevicesNames) {
  nn::GPTConfig c{.block_size = 8,
                  .vocab_size = 11,
                  .n_layer = 3,
                  .n_head = 2,
                  .n_embd = 8,
                  .moe_every = 2,
                  .moe = mixtral_options(),
                  .tensor = {.dtype = kFloat64}};
  nn::Sequential model = nn::gpt(c);
  const auto layers = nn::moe_layers(model);
  ASSERT_EQ(layers.size(), 2u);  // blocks 0 and 2
  EXPECT_EQ(layers[0].first, "transformer.h.0.mlp");
  EXPECT_EQ(layers[1].first, "transformer.h.2.mlp");
  std::set<std::string> names;
  for (auto& [name, t] : model.state_dict()) names.insert(name);
  for (const char* n :
       {"transformer.h.0.mlp.router.weight", "transformer.h.0.mlp.experts.c_fc.weight",
        "transformer.h.0.mlp.experts.c_proj.bias", "transformer.h.1.mlp.c_fc.weight"})
    EXPECT_TRUE(names.contains(n)) << n;
  EXPECT_EQ(model.state_dict().size(), 2u + 3 * 12 + 2 * 1 + 2 + 1);  // + router, the tie twice
  const Tensor logits = model(random_ids(2, 8, 1));
  const Tensor loss = nn::gpt_loss(logits, random_ids(2, 8, 2)) + nn::moe_aux_loss(model);
  loss.backward();
  for (auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(MoE, BadOptionsAreNamed) {
  nn::MoEOptions o = mixtral_options();
  o.top_k = 5;
  EXPECT_THAT(error_message<ValueError>([&] { nn::MoE m(moe_config(o)); }),
              HasSubstr("top_k 5 must be between 1 and n_experts (4)"));
  o = mixtral_options();
  o.n_experts = 0;
  EXPECT_THAT(error_message<ValueError>([&] { nn::MoE m(moe_config(o)); }),
              HasSubstr("n_experts must be at least 1"));
  o = mixtral_options();
  o.capacity_factor = 0;
  EXPECT_THAT(error_message<ValueError>([&] { nn::MoE m(moe_config(o)); }),
              HasSubstr("would drop every token"));
  nn::MoE m(moe_config(mixtral_options()));
  EXPECT_THAT(error_message<ShapeError>([&] {
                m(zeros({2, 3, 5}, {.dtype = kFloat64}));
              }),
              HasSubstr("MoE: input must be [..., 8], not [2, 3, 5]"));
}
