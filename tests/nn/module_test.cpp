// Module: the visit() walk and everything built on it — names, state dicts, printing, moving,
// cloning, train/eval.
#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using tandem::testing::values;
using ::testing::HasSubstr;

namespace {

// The reference CNN of the models issue, written as a user would.
struct Net : nn::Module {
  nn::Conv2d conv1{1, 32, 3};
  nn::Conv2d conv2{32, 64, 3};
  nn::Dropout drop{0.25};
  nn::Linear fc1{1600, 128};
  nn::Linear fc2{128, 10};
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("drop", drop);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = max_pool2d(relu(conv1(x)), {});
    h = max_pool2d(relu(conv2(h)), {});
    return fc2(relu(fc1(drop(h.flatten(1)))));
  }
};

}  // namespace

TEST(Module, NamesParametersInRegistrationOrder) {
  Net net;
  std::vector<std::string> names;
  for (auto& [name, t] : net.named_parameters()) names.push_back(name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                      "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
  EXPECT_EQ(net.parameter_count(), 320 + 18496 + 204928 + 1290);
  EXPECT_EQ(net.conv2.weight.shape(), (Shape{64, 32, 3, 3}));
  EXPECT_EQ(net.fc1.weight.shape(), (Shape{128, 1600}));
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
}

TEST(Module, PrintsLikePyTorch) {
  Net net;
  EXPECT_EQ(net.str(),
            "Net(\n"
            "  (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))\n"
            "  (conv2): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1))\n"
            "  (drop): Dropout(p=0.25, inplace=False)\n"
            "  (fc1): Linear(in_features=1600, out_features=128, bias=True)\n"
            "  (fc2): Linear(in_features=128, out_features=10, bias=True)\n"
            ")");
  nn::Sequential seq(nn::Linear(4, 3), nn::ReLU(), nn::BatchNorm1d(3));
  EXPECT_EQ(
      seq.str(),
      "Sequential(\n"
      "  (0): Linear(in_features=4, out_features=3, bias=True)\n"
      "  (1): ReLU()\n"
      "  (2): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      ")");
}

TEST(Module, InitialisesAsPyTorchDoes) {
  manual_seed(0);
  nn::Linear fc(400, 300);
  const double bound = 1 / std::sqrt(400.0);
  EXPECT_LE(abs(fc.weight).max().item(), bound);
  EXPECT_GT(abs(fc.weight).max().item(), 0.95 * bound);
  EXPECT_NEAR(fc.weight.mean().item(), 0, 0.002);
  EXPECT_LE(abs(fc.bias).max().item(), bound);
}

TEST(Module, StateDictRoundTripsAndNamesProblems) {
  manual_seed(1);
  Net a, b;
  EXPECT_NE(values(a.fc2.weight), values(b.fc2.weight));
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(values(a.fc2.weight), values(b.fc2.weight));
  nn::StateDict sd = a.state_dict();
  sd.erase(sd.begin() + 7);  // fc2.bias
  sd.emplace_back("fc3.bias", zeros({10}));
  sd[0].second = zeros({32, 1, 5, 5});  // conv1.weight, wrong shape
  const std::string msg =
      error_message<ValueError>([&] { b.load_state_dict(sd, true, "runs/ckpt.safetensors"); });
  EXPECT_THAT(msg, HasSubstr("missing key \"fc2.bias\""));
  EXPECT_THAT(msg, HasSubstr("unexpected key \"fc3.bias\""));
  EXPECT_THAT(msg, HasSubstr("\"conv1.weight\": checkpoint [32, 1, 5, 5] vs model [32, 1, 3, 3]"));
  EXPECT_THAT(msg, HasSubstr("runs/ckpt.safetensors"));
}

TEST(Module, BuffersAreInTheStateDict) {
  nn::BatchNorm2d bn(4);
  std::vector<std::string> names;
  for (auto& [name, t] : bn.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                             "num_batches_tracked"}));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.parameters().size(), 2u);
}

TEST(Module, ToMovesEveryTensorAndKeepsParametersLeaves) {
  Net net;
  net.to(Device("cpu:1"));
  for (auto& [name, t] : net.state_dict()) EXPECT_EQ(t.device(), Device("cpu:1")) << name;
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  Tensor y = net.forward(randn({2, 1, 28, 28}, {.device = Device("cpu:1")}));
  EXPECT_EQ(y.shape(), (Shape{2, 10}));
  EXPECT_THROW(net.forward(randn({2, 1, 28, 28})), DeviceError);
  net.to(kFloat64);
  EXPECT_EQ(net.fc1.weight.dtype(), kFloat64);
}

TEST(Module, CopiesShareTensorsAndCloneDoesNot) {
  Net a;
  Net shallow = a;
  EXPECT_EQ(shallow.fc1.weight.impl().storage, a.fc1.weight.impl().storage);
  Net deep = nn::clone(a);
  EXPECT_NE(deep.fc1.weight.impl().storage, a.fc1.weight.impl().storage);
  EXPECT_EQ(values(deep.fc1.weight), values(a.fc1.weight));
  nn::Sequential seq(nn::Linear(2, 2));
  nn::Sequential seq_clone = nn::clone(seq);
  EXPECT_NE(seq_clone.at<nn::Linear>(0).weight.impl().storage,
            seq.at<nn::Linear>(0).weight.impl().storage);
}

TEST(Module, TrainAndEvalReachEveryChild) {
  Net net;
  EXPECT_TRUE(net.drop.is_training());
  net.eval();
  EXPECT_FALSE(net.drop.is_training());
  Tensor x = randn({2, 1, 28, 28});
  EXPECT_EQ(values(net.forward(x)), values(net.forward(x)));  // dropout off: deterministic
  net.train();
  EXPECT_TRUE(net.fc1.is_training());
}

TEST(Module, ZeroGradClearsGradients) {
  nn::Linear fc(3, 2);
  fc(ones({4, 3})).sum().backward();
  EXPECT_TRUE(fc.weight.grad().defined());
  fc.zero_grad();
  EXPECT_FALSE(fc.weight.grad().defined());
}
