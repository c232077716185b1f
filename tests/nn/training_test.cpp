// End to end with nn/: an MLP with SGD-momentum and a small CNN with Adam learn a synthetic task
// (the short versions of the MNIST recipes; the real-data bars are in the trainer).
#include "support/expect.h"

using namespace tandem;

namespace {

// Class c draws a bright square at position c of a 3x3 grid, plus noise: learnable by a CNN and
// an MLP alike.
std::pair<Tensor, Tensor> squares(int64_t n, uint64_t seed) {
  manual_seed(seed);
  Tensor labels = (rand({n}) * 9.0).to(kInt64);
  std::vector<float> img(size_t(n * 12 * 12), 0.0f);
  const std::vector<int64_t> l = labels.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 4; ++x)
        img[size_t(i * 144 + ((l[size_t(i)] / 3) * 4 + y) * 12 + (l[size_t(i)] % 3) * 4 + x)] =
            1.0f;
  return {from_vector(img, {n, 1, 12, 12}) + randn({n, 1, 12, 12}) * 0.3, labels};
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  return logits.argmax(1).eq(labels).to(kFloat32).mean().item();
}

}  // namespace

TEST(Training, MlpWithSgdMomentumLearns) {
  auto [x, y] = squares(512, 1);
  nn::Sequential mlp(nn::Flatten(), nn::Linear(144, 64), nn::ReLU(), nn::Linear(64, 9));
  optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 200; ++step) {
    Tensor batch_x = x.narrow(0, (step % 8) * 64, 64), batch_y = y.narrow(0, (step % 8) * 64, 64);
    Tensor loss = cross_entropy(mlp(batch_x), batch_y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  auto [tx, ty] = squares(256, 2);
  mlp.eval();
  EXPECT_GT(accuracy(mlp(tx), ty), 0.95);
}

TEST(Training, CnnWithAdamLearns) {
  auto [x, y] = squares(512, 3);
  nn::Sequential cnn(nn::Conv2d(1, 8, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Conv2d(8, 16, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                     nn::Flatten(), nn::Linear(144, 9));
  optim::Adam opt(cnn.parameters(), {.lr = 3e-3});
  for (int step = 0; step < 60; ++step) {
    Tensor loss =
        cross_entropy(cnn(x.narrow(0, (step % 8) * 64, 64)), y.narrow(0, (step % 8) * 64, 64));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  auto [tx, ty] = squares(256, 4);
  cnn.eval();
  EXPECT_GT(accuracy(cnn(tx), ty), 0.95);
}
