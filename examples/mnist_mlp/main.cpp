// examples/mnist_mlp — the reference MLP recipe: 784-512-256-10 with ReLU, SGD (lr 0.05,
// momentum 0.9), batch 64, 5 epochs, on the MNIST IDX files in a directory. The training loop is
// written out: forward, loss, zero_grad, backward, step.
//
//   tandem fetch mnist                     # real digits into datasets/mnist (8,000 / 2,000)
//   build/examples/mnist_mlp datasets/mnist [epochs] [max steps per epoch] [seed]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>

using namespace tandem;

struct Mlp : nn::Module {
  nn::Linear fc1{784, 512}, fc2{512, 256}, fc3{256, 10};
  void visit(nn::Visitor& v) override {
    v("fc1", fc1);
    v("fc2", fc2);
    v("fc3", fc3);
  }
  Tensor forward(const Tensor& x) {  // x [N, 1, 28, 28] -> logits [N, 10]
    Tensor h = relu(fc1(x.flatten(1)));
    h = relu(fc2(h));
    return fc3(h);
  }
};

// Accuracy of `model` over a whole dataset, without recording the graph.
double evaluate(Mlp& model, const data::Dataset& test) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 500});
  int64_t correct = 0;
  for (auto& [x, y] : loader) correct += int64_t(model.forward(x).argmax(1).eq(y).sum().item());
  model.train();
  return double(correct) / double(test.size());
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : -1;  // for smoke runs
  const uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0;
  try {
    manual_seed(seed);
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = seed});
    Mlp model;
    optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
    std::printf("%s\n%lld parameters, %lld training images\n", model.str().c_str(),
                (long long)model.parameter_count(), (long long)train.size());
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);
      double total = 0;
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        Tensor loss = cross_entropy(model.forward(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        total += loss.item();
        if (++steps == max_steps) break;
      }
      std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%\n", epoch,
                  total / double(steps), 100 * evaluate(model, test));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
