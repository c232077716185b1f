// Saved tensors: the version check names the op and the tensor, the pack/unpack hooks run once per
// saved tensor, and offloading every saved tensor to cpu:1 and back leaves every op's gradients
// unchanged.
#include <tandem/autograd/saved_tensor.h>
#include <atomic>
#include <optional>

#include "autograd/op_table.h"
#include "support/expect.h"

namespace tandem {
namespace {

using tandem::testing::error_message;
using ::testing::HasSubstr;

TEST(SavedTensor, ModifyingOneInPlaceNamesTheOpAndTheTensor) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor x = tensor({3.0, 4.0});
  Tensor y =
      linear(x.reshape({1, 2}), w.reshape({1, 2}), Tensor()).sum();  // linear saved x as "input"
  x.mul_(2);
  const std::string msg = error_message<AutogradError>([&] { y.backward(); });
  EXPECT_THAT(msg, HasSubstr("backward of 'linear'"));
  EXPECT_THAT(msg, HasSubstr("'input'"));
  EXPECT_THAT(msg, HasSubstr("modified by an in-place op"));
}

TEST(SavedTensor, PackAndUnpackRunOncePerSavedTensor) {
  std::atomic<int> packed{0}, unpacked{0};
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, 4.0}).requires_grad_();
  Tensor loss;
  {
    SavedTensorHooks hooks(
        [&](const Tensor& t) {
          ++packed;
          return std::any(t);
        },
        [&](const std::any& p) {
          ++unpacked;
          return std::any_cast<Tensor>(p);
        });
    loss = ((a * b).relu() + a.exp()).sum();  // mul saves 2, relu 1, exp 1; add and sum none
  }
  EXPECT_EQ(packed, 4);
  EXPECT_EQ(unpacked, 0);
  loss.backward();
  EXPECT_EQ(packed, 4);
  EXPECT_EQ(unpacked, 4);
  {
    NoGradGuard off;  // nothing is recorded, so nothing is saved
    SavedTensorHooks hooks([&](const Tensor& t) { return ++packed, std::any(t); },
                           [](const std::any& p) { return std::any_cast<Tensor>(p); });
    (a * b).sum();
  }
  EXPECT_EQ(packed, 4);
}

TEST(SavedTensor, AnUnpackHookThatReturnsTheWrongTensorIsNamed) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_();
  Tensor loss;
  {
    SavedTensorHooks hooks([](const Tensor& t) { return std::any(t.to(Device::cpu(1))); },
                           [](const std::any& p) { return std::any_cast<Tensor>(p); });
    loss = a.exp().sum();
  }
  const std::string msg = error_message<AutogradError>([&] { loss.backward(); });
  EXPECT_THAT(msg, HasSubstr("backward of 'exp'"));
  EXPECT_THAT(msg, HasSubstr("cpu:1"));
}

// Every row of the op table: the gradients with every saved tensor kept on cpu:1 between forward
// and backward are the same bits as without.
struct Offloaded {
  Tensor copy;  // on cpu:1, sharing nothing with the original
  Device home;
};

class Offload : public ::testing::TestWithParam<testing::OpCase> {};

TEST_P(Offload, EverySavedTensorRoundTripsThroughCpu1) {
  const testing::OpCase& row = GetParam();
  int packed = 0, unpacked = 0;
  auto grads = [&](bool offload) {
    std::vector<Tensor> in = testing::make_inputs(row);
    Tensor out;
    {
      std::optional<SavedTensorHooks> hooks;
      if (offload)
        hooks.emplace(
            [&](const Tensor& t) {
              ++packed;
              return std::any(Offloaded{t.to(Device::cpu(1)), t.device()});
            },
            [&](const std::any& p) {
              ++unpacked;
              const auto& o = std::any_cast<const Offloaded&>(p);
              EXPECT_EQ(o.copy.device(), Device::cpu(1));
              return o.copy.to(o.home);
            });
      manual_seed(1234);  // rows with dropout draw the same masks both times
      out = row.fn(in);
    }
    (out * out).sum().backward();
    std::vector<Tensor> g;
    for (const Tensor& t : in) g.push_back(t.grad());
    return g;
  };
  const std::vector<Tensor> plain = grads(false), offloaded = grads(true);
  EXPECT_EQ(packed, unpacked) << "each saved tensor is unpacked once";
  ASSERT_EQ(plain.size(), offloaded.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(plain[i].defined(), offloaded[i].defined());
    if (plain[i].defined()) {
      EXPECT_EQ(plain[i].to_vector<double>(), offloaded[i].to_vector<double>()) << "input " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OpTable, Offload, ::testing::ValuesIn(testing::op_table()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tandem
