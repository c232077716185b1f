// examples/pipeline — model parallelism without the waiting: the model is one nn::Sequential,
// parallel::split cuts it into a stage per device, and parallel::Pipeline feeds each batch through
// in micro-batches, so the stages compute side by side (GPipe or 1F1B). After each epoch it prints
// what the pipeline measured: how busy each stage was (the rest is the bubble, (K−1)/(M+K−1) in
// theory) and each stage's peak activation memory, which 1F1B keeps lower than GPipe.
//
//   tandem fetch mnist
//   build/examples/pipeline datasets/mnist [epochs] [max steps] [devices] [gpipe|1f1b] [chunks]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace tandem;

// The reference CNN, written once; split() cuts it between its named children.
nn::Sequential reference_cnn() {
  return nn::Sequential{
      {"conv1", nn::Conv2d(1, 32, 3)},   // [N, 32, 26, 26]
      {"pool1", nn::ReLUMaxPool2d(2)},   // [N, 32, 13, 13]
      {"conv2", nn::Conv2d(32, 64, 3)},  // [N, 64, 11, 11]
      {"pool2", nn::ReLUMaxPool2d(2)},   // [N, 64, 5, 5]
      {"flatten", nn::Flatten()},       {"fc1", nn::Linear(1600, 128)}, {"relu", nn::ReLU()},
      {"fc2", nn::Linear(128, 10)}};
}

std::vector<Device> parse_devices(const std::string& list) {
  std::vector<Device> devices;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    devices.emplace_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return devices;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : -1;  // for smoke runs
  const std::string list = argc > 4 ? argv[4] : "cpu:0,cpu:1";
  const std::string schedule = argc > 5 ? argv[5] : "gpipe";
  const int64_t chunks = argc > 6 ? std::atoll(argv[6]) : 4;
  try {
    const std::vector<Device> devices = parse_devices(list);
    manual_seed(0);
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .num_workers = 1});
    nn::Sequential model = reference_cnn();
    // Balanced by parameter count; the model's own modules move to their stage's device, so the
    // optimizer (made afterwards) and a checkpoint of `model` see the trained parameters.
    parallel::Pipeline pipe(parallel::split(model, devices),
                            {.chunks = chunks, .schedule = parallel::parse_schedule(schedule)});
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    std::printf("pipeline over %s, %s, %lld micro-batches; stages of", list.c_str(),
                schedule.c_str(), (long long)chunks);
    for (parallel::Stage& s : pipe.stages()) std::printf(" %zu", s.modules.size());
    std::printf(" modules\n");
    auto loss_fn = [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); };
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);
      double total = 0, seconds = 0;
      std::vector<double> busy(devices.size(), 0);
      std::vector<int64_t> peak(devices.size(), 0);
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        opt.zero_grad();
        const parallel::PipelineResult r = pipe.step(x, y, loss_fn);  // forward and backward
        opt.step();
        total += r.loss.item();
        seconds += r.seconds;
        for (size_t k = 0; k < devices.size(); ++k) {
          busy[k] += r.busy_seconds[k];
          peak[k] = std::max(peak[k], r.peak_activation_bytes[k]);
        }
        if (++steps == max_steps) break;
      }
      int64_t correct = 0;
      {
        NoGradGuard no_grad;
        model.eval();
        for (auto& [x, y] : data::DataLoader(test, {.batch_size = 500})) {
          const Tensor out = pipe.evaluate(x);  // on the last stage's device
          correct += int64_t(out.argmax(1).eq(y.to(out.device())).sum().item());
        }
        model.train();
      }
      std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%\n", epoch,
                  total / double(steps), 100.0 * double(correct) / double(test.size()));
      for (size_t k = 0; k < devices.size(); ++k)
        std::printf("  stage %zu on %s: busy %.0f%% of the step, peak activations %.1f MiB\n", k,
                    devices[k].str().c_str(), seconds > 0 ? 100 * busy[k] / seconds : 0.0,
                    double(peak[k]) / (1 << 20));
    }
    nn::save_model("pipeline_cnn.safetensors", model);  // conv1.weight, ..., fc2.bias
    std::printf("saved pipeline_cnn.safetensors\n");
  } catch (const Error& e) {
    std::fprintf(stderr, "pipeline: %s\n", e.what());
    return 1;
  }
  return 0;
}
