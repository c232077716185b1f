// examples/data_parallel_memory — where DataParallel's memory goes. One training step of a
// classifier with a large output (784 → 64 → 20,000 classes, global batch 1024: the logits are
// 80 MiB, the weights 5 MiB, as in a language model's vocabulary layer) four ways on
// cpu:0..3: DDP with 4 ranks (one per device, a quarter of the batch each), one device,
// DataParallel, and DataParallel + DataParallelCriterion. For each: every device's peak memory
// during the step and the imbalance, device 0's peak over the mean of the others'.
//
// DataParallel gathers every replica's logits on device 0 and computes the loss there, so device 0
// holds the whole batch's output, its softmax and their gradients; with DataParallelCriterion each
// device keeps its own shard's, and only scalar losses travel.
//   build/examples/data_parallel_memory [classes] [batch]
#include <tandem/tandem.h>
#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace tandem;

namespace {

constexpr int kDevices = 4;

struct Classifier : nn::Module {
  nn::Linear hidden, out;
  explicit Classifier(int64_t classes) : hidden(784, 64), out(64, classes) {}
  void visit(nn::Visitor& v) override {
    v("hidden", hidden);
    v("out", out);
  }
  Tensor forward(const Tensor& x) { return out(relu(hidden(x))); }
};

using Peaks = std::vector<double>;  // MiB, one per device

// Runs `step` once with every device's peak reset first, and returns the peaks.
template <typename Step>
Peaks peaks_of(Step&& step) {
  for (int d = 0; d < kDevices; ++d) reset_peak_memory_stats(Device::cpu(d));
  step();
  Peaks p;
  for (int d = 0; d < kDevices; ++d)
    p.push_back(double(memory_stats(Device::cpu(d)).peak_allocated_bytes) / (1 << 20));
  return p;
}

void print_row(const char* mode, const Peaks& p) {
  std::printf("%-26s", mode);
  double others = 0;
  for (int d = 0; d < kDevices; ++d) {
    std::printf(" %9.1f", p[size_t(d)]);
    if (d > 0) others += p[size_t(d)] / (kDevices - 1);
  }
  if (others > 0)
    std::printf("   %6.2fx\n", p[0] / others);
  else
    std::printf("        -\n");
}

// One step of SGD on `model` with `loss` computed by `forward_loss`.
template <typename M, typename Loss>
void train_step(M& model, Loss&& forward_loss) {
  optim::SGD opt(model.parameters(), {.lr = 0.01});
  opt.zero_grad();
  forward_loss().backward();
  opt.step();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t classes = argc > 1 ? std::stoll(argv[1]) : 20000;
  const int64_t batch = argc > 2 ? std::stoll(argv[2]) : 1024;
  std::printf("one SGD step: 784 -> 64 -> %ld classes, batch %ld, devices cpu:0..%d\n",
              long(classes), long(batch), kDevices - 1);
  std::printf("%-26s %9s %9s %9s %9s  imbalance\n", "peak MiB", "cpu:0", "cpu:1", "cpu:2", "cpu:3");

  // DDP first: a process must fork its ranks before it starts threads of its own.
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string stem = dir + "/tandem-dp-memory-" + std::to_string(::getpid()) + "-";
  parallel::spawn(
      [&](int rank) {
        parallel::init_process_group({});
        const Device device = Device::cpu(rank);
        manual_seed(0);
        Classifier model(classes);
        model.to(device);
        parallel::DistributedDataParallel ddp(model);
        manual_seed(1);
        const Tensor x = randn({batch / kDevices, 784}).to(device);
        const Tensor y = zeros({batch / kDevices}, {.dtype = kInt64}).to(device);
        reset_peak_memory_stats(device);
        train_step(model, [&] { return cross_entropy(ddp(x), y); });
        std::ofstream(stem + std::to_string(rank))
            << double(memory_stats(device).peak_allocated_bytes) / (1 << 20);
        parallel::destroy_process_group();
      },
      kDevices);
  Peaks ddp;
  for (int r = 0; r < kDevices; ++r) {
    double mib = 0;
    std::ifstream(stem + std::to_string(r)) >> mib;
    std::filesystem::remove(stem + std::to_string(r));
    ddp.push_back(mib);
  }
  print_row("DDP (4 ranks, 1 device each)", ddp);

  manual_seed(1);
  const Tensor x = randn({batch, 784});
  const Tensor y = zeros({batch}, {.dtype = kInt64});
  std::vector<Device> devices;
  for (int d = 0; d < kDevices; ++d) devices.push_back(Device::cpu(d));

  {
    // In a scope: its weights and gradients on cpu:0 must not count in the modes measured next.
    manual_seed(0);
    Classifier single(classes);
    print_row("one device", peaks_of([&] {
                train_step(single, [&] { return cross_entropy(single.forward(x), y); });
              }));
  }

  parallel::DataParallel dp(Classifier(classes), {.device_ids = devices});
  print_row("DataParallel",
            peaks_of([&] { train_step(dp.module(), [&] { return cross_entropy(dp(x), y); }); }));
  const std::string dp_table = parallel::memory_summary(devices);

  const parallel::DataParallelCriterion criterion(
      [](const Tensor& out, const Tensor& t) { return cross_entropy(out, t); });
  print_row("DataParallel + criterion", peaks_of([&] {
              train_step(dp.module(), [&] { return criterion(dp.forward_shards(x), y); });
            }));
  std::printf("\nparallel::memory_summary after the DataParallel step:\n%s", dp_table.c_str());
  return 0;
}
