// tests/nn/container_test.cpp — named Sequential children and nesting (the names a state dict
// and a checkpoint use), bad names, AnyModule's copy and share, and Checkpointed: transparent to
// names and to train()/eval(), the same outputs and gradients as the plain module, and still right
// after the module it ran on is gone (a DataParallel replica's copy).
#include <tandem/nn/activation_checkpoint.h>

#include "support/expect.h"

using namespace tandem;
using tandem::testing::error_message;
using ::testing::HasSubstr;

namespace {

std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, t] : m.state_dict()) out.push_back(name);
  return out;
}

nn::Sequential block(int64_t in, int64_t out) {
  return nn::Sequential{
      {"fc", nn::Linear(in, out)}, {"bn", nn::BatchNorm1d(out)}, {"relu", nn::ReLU()}};
}

TEST(Sequential, NamedAndNestedChildrenNameTheirParameters) {
  nn::Sequential net{{"block1", block(4, 8)}, {"head", nn::Linear(8, 2)}};
  EXPECT_EQ(names(net), (std::vector<std::string>{
                            "block1.fc.weight", "block1.fc.bias", "block1.bn.weight",
                            "block1.bn.bias", "block1.bn.running_mean", "block1.bn.running_var",
                            "block1.bn.num_batches_tracked", "head.weight", "head.bias"}));
  EXPECT_EQ(net.size(), 2u);
  EXPECT_EQ(net.at<nn::Linear>("head").weight.shape(), (Shape{2, 8}));
  EXPECT_EQ(net["block1"].type_name(), "Sequential");
  // Unnamed children are numbered, as in PyTorch.
  nn::Sequential plain(nn::Linear(4, 3), nn::ReLU());
  EXPECT_EQ(names(plain), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_THAT(net.str(), HasSubstr("(block1): Sequential(\n    (fc): Linear("));
}

TEST(Sequential, BadNamesAreClearErrors) {
  EXPECT_THAT(error_message<ValueError>([] {
                nn::Sequential s{{"fc", nn::Linear(2, 2)}, {"fc", nn::ReLU()}};
              }),
              HasSubstr("two modules are called \"fc\""));
  EXPECT_THAT(error_message<ValueError>([] {
                nn::Sequential s{{"a..b", nn::ReLU()}};
              }),
              HasSubstr("\"a..b\" cannot name a module"));
  EXPECT_THAT(error_message<ValueError>([] {
                nn::Sequential s{{"", nn::ReLU()}};
              }),
              HasSubstr("cannot name a module"));
  nn::Sequential s{{"fc", nn::Linear(2, 2)}};
  EXPECT_THAT(error_message<IndexError>([&] { s["conv"]; }),
              HasSubstr("no module called \"conv\" (it has fc)"));
  EXPECT_THAT(error_message<ValueError>([&] { s.at<nn::ReLU>("fc"); }),
              HasSubstr("is a Linear, not the type asked for"));
}

TEST(Sequential, SliceSharesTheModulesAndKeepsTheirNames) {
  nn::Sequential net{{"a", nn::Linear(3, 3)}, {"b", nn::ReLU()}, {"c", nn::Linear(3, 1)}};
  nn::Sequential tail = net.slice(1, 3);
  EXPECT_EQ(names(tail), (std::vector<std::string>{"c.weight", "c.bias"}));
  tail.to(kFloat64);  // the same module objects: the model changes too
  EXPECT_EQ(net.at<nn::Linear>("c").weight.dtype(), kFloat64);
  EXPECT_EQ(net.at<nn::Linear>("a").weight.dtype(), kFloat32);
}

TEST(AnyModule, CopiesAreNewModulesWithTheSameTensorsAndSharedHandlesAreTheSame) {
  nn::AnyModule a = nn::Linear(3, 2);
  nn::AnyModule copy = a;
  nn::AnyModule same = a.shared();
  EXPECT_NE(&copy.get(), &a.get());
  EXPECT_EQ(&same.get(), &a.get());
  EXPECT_EQ(copy.get<nn::Linear>().weight.impl_ptr(), a.get<nn::Linear>().weight.impl_ptr());
  EXPECT_EQ(copy.forward(ones({1, 3})).shape(), (Shape{1, 2}));
  // Constructed from a shared_ptr, it is that object.
  auto net = std::make_shared<nn::Sequential>(nn::Linear(3, 2));
  nn::AnyModule held(net);
  net->eval();
  EXPECT_FALSE(held->is_training());
  struct NoForward : nn::Module {
    void visit(nn::Visitor&) override {}
  };
  EXPECT_THAT(error_message<ValueError>([] { nn::AnyModule(NoForward{}).forward(ones({1})); }),
              HasSubstr("NoForward has no forward(const Tensor&)"));
}

// A module held through a pointer to its base class would be copied as the base: refused.
TEST(AnyModule, AModuleHeldAsItsBaseClassIsRefused) {
  struct Wider : nn::Sequential {
    nn::Linear extra{2, 2};
  };
  std::shared_ptr<nn::Sequential> base = std::make_shared<Wider>();
  EXPECT_THAT(error_message<ValueError>([&] { nn::AnyModule a(base); }),
              HasSubstr("held through a pointer to a base class"));
}

// Two tensors under one name (own parameters beside a transparent child's) would save one and
// load it into both: state_dict refuses.
TEST(Module, TwoTensorsUnderOneNameAreAnError) {
  struct Clash : nn::Module {
    Tensor weight = zeros({2});
    nn::Linear inner{2, 2};
    void visit(nn::Visitor& v) override {
      v("weight", weight);
      v("", inner);
    }
  };
  Clash c;
  EXPECT_THAT(error_message<ValueError>([&] { c.state_dict(); }),
              HasSubstr("two tensors are called \"weight\""));
}

// The same model with and without Checkpointed blocks, from the same seed.
nn::Sequential model(bool checkpointed) {
  manual_seed(1);
  nn::AnyModule b = block(4, 8);
  if (checkpointed) b = nn::Checkpointed(b);
  nn::Sequential net;
  net.push_back("block1", b);
  net.push_back("head", nn::Linear(8, 2));
  net.to(kFloat64);
  return net;
}

// Both: the same names, outputs and gradients, and train()/eval() reaches the wrapped module
// (batch norm's mode).
TEST(Checkpointed, IsTransparentToNamesModesAndGradients) {
  nn::Sequential plain = model(false), wrapped = model(true);
  EXPECT_EQ(names(wrapped), names(plain));
  EXPECT_THAT(wrapped.str(), HasSubstr("(block1): Checkpointed(\n    Sequential("));
  auto& inner = dynamic_cast<nn::Sequential&>(wrapped.at<nn::Checkpointed>("block1").module());
  const Tensor x = randn({6, 4}, {.dtype = kFloat64});
  for (bool training : {true, false}) {
    plain.train(training);
    wrapped.train(training);
    EXPECT_EQ(inner["bn"].is_training(), training);
    plain.zero_grad();
    wrapped.zero_grad();
    const Tensor a = plain(x), b = wrapped(x);
    EXPECT_TRUE(tandem::testing::all_close(a, b, 0, 0));
    if (!training) continue;
    a.sum().backward();
    b.sum().backward();
    const auto pa = plain.parameters(), pb = wrapped.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i)
      EXPECT_TRUE(tandem::testing::all_close(pa[i].grad(), pb[i].grad(), 0, 0)) << i;
  }
}

TEST(Checkpointed, RecomputesAfterItsModuleIsGone) {
  manual_seed(2);
  const Tensor x = randn({5, 4}, {.dtype = kFloat64});
  Tensor w;
  Tensor out;
  {
    nn::Linear fc(4, 3, {.bias = false});
    fc.to(kFloat64);
    w = fc.weight;
    auto copy = std::make_shared<nn::Checkpointed>(nn::Sequential(fc, nn::Tanh()));
    out = (*copy)(x);  // the wrapper and its copy of the layers go away here
  }
  out.sum().backward();
  const Tensor expected = (1.0 - tanh(x.matmul(w.detach().t())).pow(2.0)).t().matmul(x);
  EXPECT_TRUE(tandem::testing::all_close(w.grad(), expected, 1e-12, 1e-12));
}

}  // namespace
