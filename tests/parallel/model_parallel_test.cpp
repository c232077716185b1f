// tests/parallel/model_parallel_test.cpp — plain model parallelism: a Sequential cut into stages on
// cpu:0 and cpu:1 (parallel::split) trains exactly as the whole model on one device (float64, 5
// Adam steps, 1e-10 abs + 1e-8 rel), gradients flowing back across the devices; bad cuts are
// clear errors.
#include <tandem/parallel/pipeline/split.h>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

nn::Sequential deep_mlp() {  // 13 modules: 6 × (Linear(16, 16) + Tanh), Linear(16, 10)
  manual_seed(4);
  nn::Sequential s;
  for (int i = 0; i < 6; ++i) {
    s.push_back(nn::Linear(16, 16));
    s.push_back(nn::Tanh());
  }
  s.push_back(nn::Linear(16, 10));
  s.to(kFloat64);
  return s;
}

// 5 Adam steps of `forward` over `params` on a fixed batch of 12; the parameters afterwards.
template <typename Forward>
std::vector<double> train(nn::Sequential& model, Forward&& forward) {
  manual_seed(9);
  const Tensor x = randn({12, 16}, {.dtype = kFloat64});
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 12; ++i) labels.push_back((i * 7) % 10);
  const Tensor y = from_vector(labels, {12});
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  for (int s = 0; s < 5; ++s) {
    opt.zero_grad();
    const Tensor out = forward(x);
    cross_entropy(out, y.to(out.device())).backward();
    opt.step();
  }
  model.to(Device::cpu());
  return tandem::testing::flat_params(model);
}

TEST(ModelParallel, TwoStagesOnTwoDevicesTrainAsOneDevice) {
  nn::Sequential one = deep_mlp();
  const std::vector<double> expected = train(one, [&](const Tensor& x) { return one(x); });
  for (const std::vector<int64_t>& balance : {std::vector<int64_t>{}, {3, 10}, {12, 1}}) {
    nn::Sequential model = deep_mlp();
    std::vector<Stage> stages = split(model, {Device::cpu(0), Device::cpu(1)}, balance);
    EXPECT_EQ(&stages[0].modules[0], &model[0]) << "a stage holds the model's own modules";
    EXPECT_EQ(model[0].parameters()[0].device(), Device::cpu(0));
    EXPECT_EQ(model[12].parameters()[0].device(), Device::cpu(1));
    tandem::testing::expect_same_params(
        train(model, [&](const Tensor& x) { return run_stages(stages, x); }), expected);
  }
}

TEST(ModelParallel, ThreeStagesBalancedByParameters) {
  nn::Sequential model = deep_mlp();
  // Linears hold 272 parameters each (the last 170), Tanh none: 7 Linears over 3 stages.
  const std::vector<int64_t> sizes = balance_by_parameters(model, 3);
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_EQ(sizes[0] + sizes[1] + sizes[2], 13);
  std::vector<Stage> stages = split(model, {Device::cpu(0), Device::cpu(1), Device::cpu(2)});
  for (Stage& s : stages) {
    int64_t params = 0;
    for (const Tensor& p : s.modules.parameters()) params += p.numel();
    EXPECT_LE(params, 3 * 272) << "a stage holds more than 3 of the 7 Linears";
  }
}

TEST(ModelParallel, BadBalancesAreClearErrors) {
  nn::Sequential model = deep_mlp();
  const std::vector<Device> two{Device::cpu(0), Device::cpu(1)};
  EXPECT_THAT(error_message<ValueError>([&] {
                split(model, two, {3, 9});
              }),
              HasSubstr("balance sums to 12 modules but the Sequential has 13"));
  EXPECT_THAT(error_message<ValueError>([&] {
                split(model, two, {0, 13});
              }),
              HasSubstr("balance[0] = 0"));
  EXPECT_THAT(error_message<ValueError>([&] { split(model, two, {13}); }),
              HasSubstr("balance has 1 stages but there are 2"));
  nn::Sequential tiny;
  tiny.push_back(nn::Linear(2, 2));
  EXPECT_THAT(error_message<ValueError>([&] { split(tiny, two); }),
              HasSubstr("2 stages for 1 modules"));
}

}  // namespace
}  // namespace tandem::parallel
