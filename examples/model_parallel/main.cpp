// examples/model_parallel — the simplest way to use two devices for one model: put its first half
// on one device and its second half on the other, and move the activation in between. The move
// is differentiable, so backward carries the gradient back across, and one optimizer trains both
// halves. Its flaw is visible in the timeline: while one device computes, the other waits
// (parallel::Pipeline's micro-batches are the fix). The reference CNN, features on the first
// device and classifier on the second; the memory table shows what each holds.
//
//   tandem fetch mnist
//   build/examples/model_parallel datasets/mnist [epochs] [max steps] [devices, e.g. cpu:0,cpu:1]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace tandem;

// The reference CNN in two stages: each layer is placed once, and forward moves the activation.
struct TwoStageCnn : nn::Module {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};  // stage 0: the features, on `first`
  nn::Linear fc1{1600, 128}, fc2{128, 10};       // stage 1: the classifier, on `second`
  nn::ReLUMaxPool2d pool{2};                     // ReLU, then 2×2 max-pooling, in one pass
  Device first, second;

  TwoStageCnn(Device a, Device b) : first(a), second(b) {
    conv1.to(first);
    conv2.to(first);
    fc1.to(second);
    fc2.to(second);
  }
  void visit(nn::Visitor& v) override {
    v("conv1", conv1);
    v("conv2", conv2);
    v("fc1", fc1);
    v("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = pool(conv1(x.to(first)));
    h = pool(conv2(h)).flatten(1);
    h = h.to(second);  // the only line model parallelism adds; backward copies dh back
    return fc2(relu(fc1(h)));
  }
};

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : -1;  // for smoke runs
  const std::string list = argc > 4 ? argv[4] : "cpu:0,cpu:1";
  try {
    const size_t comma = list.find(',');
    if (comma == std::string::npos) throw ValueError("expected two devices, e.g. cpu:0,cpu:1");
    const Device first(list.substr(0, comma)), second(list.substr(comma + 1));
    manual_seed(0);
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 1});
    TwoStageCnn model(first, second);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});  // parameters on both devices
    std::printf("model parallel: features on %s, classifier on %s\n", first.str().c_str(),
                second.str().c_str());
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);
      double total = 0;
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        const Tensor loss = cross_entropy(model.forward(x), y.to(second));  // on the last device
        opt.zero_grad();
        loss.backward();  // second's nodes on its backward thread, then first's
        opt.step();
        total += loss.item();
        if (++steps == max_steps) break;
      }
      int64_t correct = 0;
      {
        NoGradGuard no_grad;
        model.eval();
        for (auto& [x, y] : data::DataLoader(test, {.batch_size = 500}))
          correct += int64_t(model.forward(x).argmax(1).eq(y.to(second)).sum().item());
        model.train();
      }
      std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%\n", epoch,
                  total / double(steps), 100.0 * double(correct) / double(test.size()));
    }
    std::printf("memory per device:\n%s", parallel::memory_summary({first, second}).c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
