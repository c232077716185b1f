// examples/mnist_data_parallel — the reference CNN recipe (examples/mnist_cnn) trained with
// DataParallel in one process: each batch of 64 is cut across the devices, every device runs a
// replica of the model on its piece and computes the loss of its own piece
// (DataParallelCriterion), and backward sums the replicas' gradients into the model's own
// parameters, which one Adam optimizer updates. Works the same on cpu:N and cuda:N.
//
//   tandem fetch mnist
//   build/examples/mnist_data_parallel datasets/mnist [epochs] [max steps] [devices, e.g.
//   cpu:0,cpu:1]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace tandem;

struct Cnn : nn::Module {
  nn::Conv2d conv1{1, 32, 3}, conv2{32, 64, 3};
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
    return fc2(relu(fc1(h.flatten(1))));
  }
};

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> devices;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) devices.emplace_back(item);
  return devices;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : -1;  // for smoke runs
  const std::string device_list = argc > 4 ? argv[4] : "cpu:0,cpu:1";
  try {
    const std::vector<Device> devices = parse_devices(device_list);
    manual_seed(0);
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 1});
    Cnn model;
    model.to(devices[0]);  // the module lives on the first device; replicas are made per step
    parallel::DataParallel dp(model, {.device_ids = devices});
    const parallel::DataParallelCriterion criterion(
        [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); }, devices[0]);
    optim::Adam opt(dp.module().parameters(), {.lr = 1e-3});
    std::printf("DataParallel over %s\n", device_list.c_str());
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);
      double total = 0;
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        Tensor loss = criterion(dp.forward_shards(x.to(devices[0])), y.to(devices[0]));
        opt.zero_grad();
        loss.backward();
        opt.step();
        total += loss.item();
        if (++steps == max_steps) break;
      }
      int64_t correct = 0;
      {
        NoGradGuard no_grad;  // evaluation runs the replicas too, recording nothing
        dp.module().eval();
        for (auto& [x, y] : data::DataLoader(test, {.batch_size = 500}))
          correct += int64_t(dp(x.to(devices[0])).argmax(1).eq(y.to(devices[0])).sum().item());
        dp.module().train();
      }
      std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%\n", epoch,
                  total / double(steps), 100.0 * double(correct) / double(test.size()));
    }
    std::printf("memory per device:\n%s", parallel::memory_summary(devices).c_str());
    nn::save_model("mnist_data_parallel.safetensors", dp.module());  // the module, not the wrapper
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist_data_parallel: %s\n", e.what());
    return 1;
  }
  return 0;
}
