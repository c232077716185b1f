// examples/mnist_amp — mixed precision with the loop written out: the reference MLP
// (784-512-256-10, Adam 1e-3, batch 64) trained under autocast, in bfloat16 or float16.
//
//   - AutocastGuard: inside it, the linear layers multiply in the 16-bit type (oneDNN's bf16
//     kernels on a CPU with AVX512-BF16/AMX, tensor cores on a GPU) and cross_entropy runs in
//     float32. The parameters stay float32; their gradients come back float32.
//   - GradScaler: float16 needs it (its smallest normal is 6e-5, and small gradients would flush
//     to zero); bfloat16 has float32's range, so its scaler is created disabled and passes
//     everything through. Skipped steps are counted and printed, not silent.
//
//   tandem fetch mnist
//   build/examples/mnist_amp datasets/mnist [bf16|fp16] [epochs] [max steps per epoch] [device]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <string>

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

// Held-out accuracy, under autocast too (inference gets the same speed-up).
double evaluate(Mlp& model, const data::Dataset& test, Device device, DType amp) {
  NoGradGuard no_grad;
  AutocastGuard autocast(device.type(), amp);
  data::DataLoader loader(test, {.batch_size = 500});
  int64_t correct = 0;
  for (auto& [x, y] : loader)
    correct += int64_t(model.forward(x.to(device)).argmax(1).eq(y.to(device)).sum().item());
  return double(correct) / double(test.size());
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const std::string format = argc > 2 ? argv[2] : "bf16";
  const int epochs = argc > 3 ? std::atoi(argv[3]) : 5;
  const int64_t max_steps = argc > 4 ? std::atoll(argv[4]) : -1;  // for smoke runs
  try {
    const Device device(argc > 5 ? argv[5] : "cpu");
    TD_CHECK_VALUE(format == "bf16" || format == "fp16", "mnist_amp: the format is bf16 or fp16, ",
                   "not ", format);
    const DType amp = format == "bf16" ? kBFloat16 : kFloat16;
    manual_seed(0);
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 0});
    Mlp model;
    model.to(device);
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    optim::GradScaler scaler({.enabled = amp == kFloat16});
    std::printf("autocast %s on %s; gradient scaler %s\n", format.c_str(), device.str().c_str(),
                scaler.is_enabled() ? "on" : "off (not needed for bfloat16)");
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);
      double total = 0;
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        Tensor loss;
        {
          AutocastGuard autocast(device.type(), amp);  // forward and loss only
          loss = cross_entropy(model.forward(x.to(device)), y.to(device));
        }
        opt.zero_grad();
        scaler.scale(loss).backward();  // outside the guard: backward follows forward's dtypes
        scaler.step(opt);               // unscales, and skips the step on inf/NaN gradients
        scaler.update();                // halves the scale after a skip, grows it after 2,000
        total += loss.item();
        if (++steps == max_steps) break;
      }
      std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%", epoch,
                  total / double(steps), 100 * evaluate(model, test, device, amp));
      if (scaler.is_enabled())
        std::printf(" (loss scale %g, %lld steps skipped)", scaler.get_scale(),
                    (long long)scaler.skipped_steps());
      std::printf("\n");
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist_amp: %s\n", e.what());
    return 1;
  }
  return 0;
}
