// examples/mnist_cnn — the reference CNN recipe: conv 1→32 3×3, ReLU, max-pool 2, conv 32→64 3×3,
// ReLU, max-pool 2, fc 1600→128, ReLU, fc 128→10, with Adam (lr 1e-3), batch 64, 5 epochs, on the
// MNIST IDX files in a directory; saves the trained weights as PyTorch-loadable safetensors.
//
//   tandem fetch mnist                     # real digits into datasets/mnist (8,000 / 2,000)
//   build/examples/mnist_cnn datasets/mnist [epochs] [max steps per epoch] [seed]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>

using namespace tandem;

struct Cnn : nn::Module {
  nn::Conv2d conv1{1, 32, 3};   // [N,1,28,28]  -> [N,32,26,26] -> pool [N,32,13,13]
  nn::Conv2d conv2{32, 64, 3};  // [N,32,13,13] -> [N,64,11,11] -> pool [N,64,5,5]
  nn::Linear fc1{1600, 128}, fc2{128, 10};
  nn::ReLUMaxPool2d pool{2};  // ReLU, then 2×2 max-pooling, in one pass
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = pool(conv1(x));
    h = pool(conv2(h));
    return fc2(relu(fc1(h.flatten(1))));  // logits [N, 10]
  }
};

double evaluate(Cnn& model, const data::Dataset& test) {
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
    data::DataLoader loader(train,
                            {.batch_size = 64, .shuffle = true, .seed = seed, .num_workers = 1});
    Cnn model;
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    std::printf("%s\n%lld parameters\n", model.str().c_str(), (long long)model.parameter_count());
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
    nn::save_model("mnist_cnn.safetensors", model);  // loads in PyTorch: same names and layouts
    std::printf("saved mnist_cnn.safetensors\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist_cnn: %s\n", e.what());
    return 1;
  }
  return 0;
}
