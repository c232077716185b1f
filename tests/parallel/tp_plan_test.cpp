// tests/parallel/tp_plan_test.cpp — a tensor-parallel plan is a table over a model's names
// (parallel/tp/plan.h): `tandem train`'s image MLP under its two-row plan (layer1.fc a column
// layer, layer2.fc a row layer, its head replicated) trains 3 AdamW steps with a clip that bites
// on 2 thread ranks as one device does (float64, each tensor ≤ 1e-12 relative, the slices put
// back together through the placement table); the model it was cut from is left as it was; and a
// plan that does not fit the model says which entry and why.
#include <tandem/parallel/clip_grad_norm.h>
#include <tandem/parallel/tp/plan.h>
#include <tandem/parallel/whole_state.h>
#include <tandem/tandem.h>

#include <cmath>
#include <map>

#include "support/expect.h"

namespace tandem::parallel::tp::plan_test {  // named: unity builds join test files
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

constexpr double kClip = 0.05;

// tools/train/models.cpp's mlp, smaller: its names, its nesting.
nn::Sequential mlp() {
  manual_seed(11);
  nn::LinearOptions f64{.tensor = {.dtype = kFloat64}};
  const auto dense = [&](int64_t in, int64_t out) {
    return nn::Sequential{{"fc", nn::Linear(in, out, f64)}, {"relu", nn::ReLU()}};
  };
  return nn::Sequential{
      {"layer1", dense(12, 8)}, {"layer2", dense(8, 6)}, {"head", nn::Linear(6, 3, f64)}};
}

const Plan kMlpPlan = {{.name = "layer1.fc", .cut = Cut::Column},
                       {.name = "layer2.fc", .cut = Cut::Row}};

// Drawn once, before any rank thread starts (manual_seed reseeds every device's generator).
const std::vector<std::pair<Tensor, Tensor>>& batches() {
  static const std::vector<std::pair<Tensor, Tensor>> all = [] {
    std::vector<std::pair<Tensor, Tensor>> out;
    manual_seed(100);
    for (int step = 0; step < 3; ++step) {
      const std::vector<int64_t> labels = {step % 3 == 0 ? 0 : 1, 2, 0, 1, 2};
      out.emplace_back(randn({5, 12}, {.dtype = kFloat64}), from_vector(labels, {5}));
    }
    return out;
  }();
  return all;
}

// Three clipped AdamW steps; `clip` returns the norm before clipping.
template <typename Forward, typename Clip>
void train(nn::Module& model, Forward&& forward, Clip&& clip) {
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  for (const auto& [x, y] : batches()) {
    opt.zero_grad();
    cross_entropy(forward(x), y).backward();
    EXPECT_GT(clip(), kClip) << "the clip must bite";
    opt.step();
  }
}

double relative_error(const Tensor& a, const Tensor& b) {
  return std::sqrt(sum((a - b) * (a - b)).item() / sum(b * b).item());
}

TEST(TensorParallelPlan, AnImageMlpUnderItsTwoRowPlanTrainsAsOneDevice) {
  batches();
  nn::Sequential one = mlp();
  train(
      one, [&](const Tensor& x) { return one(x); },
      [&] { return optim::clip_grad_norm_(one.parameters(), kClip); });
  const nn::Sequential whole = mlp();
  const nn::StateDict before = nn::clone(whole).state_dict();
  nn::StateDict got;
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        auto table = std::make_shared<PlacementTable>();
        nn::Sequential model = parallelize(whole, g, kMlpPlan, {.placements = table});
        EXPECT_EQ(model.at<nn::Sequential>("layer1").at<ColumnParallelLinear>("fc").weight.size(0),
                  4);
        train(
            model, [&](const Tensor& x) { return model(x); },
            [&] { return clip_grad_norm_(*table, kClip); });
        nn::StateDict state = full_state_dict(*table, model, g.get());
        if (g->rank() == 0) got = std::move(state);
      },
      2);
  const std::map<std::string, Tensor> by_name(got.begin(), got.end());
  for (const auto& [name, p] : one.named_parameters()) {
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_LE(relative_error(by_name.at(name), p), 1e-12) << name;
  }
  nn::Sequential copy = whole;
  const nn::StateDict after = copy.state_dict();
  for (size_t i = 0; i < before.size(); ++i)  // the whole model was copied, not cut
    EXPECT_EQ(relative_error(after[i].second, before[i].second), 0.0) << before[i].first;
}

TEST(TensorParallelPlan, APlanThatDoesNotFitTheModelNamesItsEntry) {
  const nn::Sequential whole = mlp();
  spawn_threads(
      [&](std::shared_ptr<Communicator> g) {
        EXPECT_THAT(error_message<ValueError>([&] {
                      parallelize(whole, g, {{.name = "layer3.fc", .cut = Cut::Column}});
                    }),
                    HasSubstr("the entry \"layer3.fc\" names no layer of the model (its items: "
                              "layer1, layer2, head)"));
        EXPECT_THAT(error_message<ValueError>(
                        [&] { parallelize(whole, g, {{.name = "layer1.relu", .cut = Cut::Row}}); }),
                    HasSubstr("\"layer1.relu\" names layer1.relu, a ReLU; its cut takes a Linear"));
        EXPECT_THAT(error_message<ValueError>(
                        [&] { parallelize(whole, g, {{.name = "head", .cut = Cut::VocabRows}}); }),
                    HasSubstr("names head, a Linear; its cut takes an Embedding"));
        EXPECT_THAT(error_message<ValueError>([&] {
                      parallelize(whole, g, {{.name = "layer2", .cut = Cut::OwnStream}});
                    }),
                    HasSubstr("OwnStream takes a Dropout or a CausalSelfAttention"));
      },
      2);
}

}  // namespace
}  // namespace tandem::parallel::tp::plan_test
