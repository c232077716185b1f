// Tandem's ResNet-18 against PyTorch's (tests/fixtures/resnet-pytorch: torchvision's resnet18 with
// a CIFAR stem and a narrow first stage, in float64): torchvision's names in its order, the same
// logits, loss and every gradient in training mode, three SGD steps (momentum, weight decay)
// giving the same parameters and running statistics, and the same logits in eval mode, to 1e-9
// relative. And the ImageNet shape: torchvision's parameter count and output.
#include "core/safetensors_util.h"
#include "support/expect.h"

using namespace tandem;
using tandem::testing::all_close;

namespace {

constexpr double kResNetRtol = 1e-9, kResNetAtol = 1e-12;

struct ResNetFixture {
  SafetensorsFile file =
      load_safetensors(TANDEM_TEST_FIXTURES "/resnet-pytorch/resnet_small.safetensors");
  nn::Sequential model = nn::resnet18(
      {.num_classes = 10, .width = 4, .small_images = true, .tensor = {.dtype = kFloat64}});
  ResNetFixture() {
    nn::StateDict weights;
    for (auto& [name, t] : file.tensors)
      if (name.starts_with("weight.")) weights.emplace_back(name.substr(7), t);
    model.load_state_dict(weights);  // strict
  }
  Tensor batch(const char* name, int64_t step) const { return file.at(name).select(0, step); }
};

TEST(ResNetMatchesPyTorch, TorchvisionsNamesInItsOrder) {
  ResNetFixture f;
  std::vector<std::string> want, got;
  for (auto& [name, t] : f.file.tensors)
    if (name.starts_with("weight.")) want.push_back(name.substr(7));
  for (auto& [name, t] : f.model.state_dict()) got.push_back(name);
  // The fixture keeps its tensors sorted by name; the model's order is PyTorch's state_dict order,
  // which make_fixture.py checked against torchvision's resnet18.
  std::sort(want.begin(), want.end());
  std::vector<std::string> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, want);
  ASSERT_GE(got.size(), 6u);
  EXPECT_EQ(got[0], "conv1.weight");
  EXPECT_EQ(got[5], "bn1.num_batches_tracked");
  EXPECT_EQ(got.back(), "fc.bias");
}

TEST(ResNetMatchesPyTorch, LogitsLossAndEveryGradient) {
  ResNetFixture f;
  const Tensor logits = f.model(f.batch("x", 0));
  EXPECT_TRUE(all_close(logits, f.file.at("logits"), kResNetAtol, kResNetRtol));
  const Tensor loss = cross_entropy(logits, f.batch("y", 0));
  EXPECT_TRUE(all_close(loss.reshape({1}), f.file.at("loss"), kResNetAtol, kResNetRtol));
  loss.backward();
  int checked = 0;
  for (auto& [name, p] : f.model.named_parameters()) {
    EXPECT_TRUE(all_close(p.grad(), f.file.at("grad." + name), kResNetAtol, kResNetRtol)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 62);  // torchvision's resnet18 has 62 parameter tensors
}

TEST(ResNetMatchesPyTorch, ThreeSgdStepsThenEvalMode) {
  ResNetFixture f;
  optim::SGD opt(f.model.parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  const std::vector<double> want_losses = f.file.at("losses").to_vector<double>();
  for (int64_t s = 0; s < 3; ++s) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(f.model(f.batch("x", s)), f.batch("y", s));
    EXPECT_NEAR(loss.item(), want_losses[size_t(s)], kResNetRtol * want_losses[size_t(s)]) << s;
    loss.backward();
    opt.step();
  }
  for (auto& [name, t] : f.model.state_dict())
    EXPECT_TRUE(all_close(t.to(kFloat64), f.file.at("after." + name).to(kFloat64), kResNetAtol,
                          kResNetRtol))
        << name;
  f.model.eval();
  EXPECT_TRUE(
      all_close(f.model(f.batch("x", 0)), f.file.at("eval_logits"), kResNetAtol, kResNetRtol));
}

TEST(ResNet, ImageNetShapeHasTorchvisionsParameterCount) {
  manual_seed(0);
  nn::Sequential model = nn::resnet18();  // 1000 classes, the 7×7 stem and max-pool
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  EXPECT_EQ(n, 11'689'512);  // sum(p.numel() for p in torchvision.models.resnet18().parameters())
  model.eval();
  EXPECT_EQ(model(randn({1, 3, 64, 64})).shape(), (Shape{1, 1000}));
  nn::Sequential r34 = nn::resnet({.blocks = {3, 4, 6, 3}, .num_classes = 10});
  int64_t n34 = 0;
  for (const Tensor& p : r34.parameters()) n34 += p.numel();
  EXPECT_EQ(n34, 21'289'802);  // torchvision's resnet34(num_classes=10)
}

TEST(ResNet, BadInputIsAClearError) {
  nn::Sequential model = nn::resnet18({.num_classes = 10, .width = 4, .small_images = true});
  EXPECT_THAT(tandem::testing::error_message<ShapeError>([&] {
                (void)model(randn({3, 32, 32}));
              }),
              ::testing::HasSubstr("conv2d"));
  EXPECT_THAT(tandem::testing::error_message<ValueError>([] {
                (void)nn::resnet({.blocks = {2, 2, 2}});
              }),
              ::testing::HasSubstr("4 stages"));
}

}  // namespace
