// examples/sharding_memory — what each device holds under DDP, ZeRO-1 and ZeRO-2, beside the
// formula. The model is 8 × Linear(2048, 2048) (Ψ = 33.6 M parameters, float32) trained with Adam
// by 4 ranks, threads on cpu:0..3 (the in-process communicator), batch 8 per rank. For each mode
// and rank: the bytes held after a step and the peak during the second step (the first creates
// Adam's state), in MB, and the predicted bytes:
//   DDP     4Ψ parameters + 4Ψ gradients + 4Ψ bucket copy + 8Ψ Adam        = 20Ψ
//   ZeRO-1  4Ψ parameters + 4Ψ buckets (the averaged chunk inside) + 8Ψ/N Adam = 8Ψ + 8Ψ/N
//   ZeRO-2  4Ψ parameters + (4Ψ chunk + 8Ψ Adam) / N                       = 4Ψ + 12Ψ/N
// The peak adds what backward holds for a moment: activations (small here), the gradient being
// copied into its bucket, and under ZeRO-2 the (at most two) buckets being reduced.
//   build/examples/sharding_memory [layers] [width]
#include <tandem/tandem.h>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace tandem;

namespace {

constexpr int kRanks = 4;
constexpr int64_t kBatch = 8;

struct Stack : nn::Module {  // `layers` × Linear(width, width), ReLU between
  std::vector<nn::Linear> layers;
  Stack(int n, int64_t width) {
    for (int i = 0; i < n; ++i) layers.emplace_back(width, width);
  }
  void visit(nn::Visitor& v) override {
    for (size_t i = 0; i < layers.size(); ++i) v(std::to_string(i), layers[i]);
  }
  Tensor forward(Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i) x = i ? layers[i](relu(x)) : layers[i](x);
    return x;
  }
};

struct Row {
  double held = 0, peak = 0;  // MB
};

// Two Adam steps with DDP at `stage` (0: plain) on 4 ranks; each rank's bytes after the first
// step and its peak during the second.
std::vector<Row> measure(int stage, int layers, int64_t width) {
  std::vector<std::unique_ptr<Stack>> models;
  for (int r = 0; r < kRanks; ++r) {
    manual_seed(0);
    models.push_back(std::make_unique<Stack>(layers, width));
    models.back()->to(Device::cpu(r));
  }
  std::vector<Row> rows(kRanks);
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        Stack& model = *models[size_t(r)];
        parallel::DistributedDataParallel ddp(model, {.group = group, .zero_stage = stage});
        std::unique_ptr<optim::Optimizer> opt;
        if (stage)
          opt = parallel::zero_optimizer<optim::Adam>(ddp, model.parameters(),
                                                      optim::AdamOptions{.lr = 1e-4});
        else
          opt = std::make_unique<optim::Adam>(model.parameters(), optim::AdamOptions{.lr = 1e-4});
        for (int step = 0; step < 2; ++step) {
          if (step == 1) reset_peak_memory_stats(dev);
          opt->zero_grad();
          {
            const Tensor x = randn({kBatch, width}, {.device = dev});
            const Tensor y = ddp(x);
            (y * y).mean().backward();
          }
          opt->step();
          group->barrier()->wait();  // every rank is done with the step's collectives
          if (step == 0) rows[size_t(r)].held = double(memory_stats(dev).allocated_bytes) / 1e6;
        }
        rows[size_t(r)].peak = double(memory_stats(dev).peak_allocated_bytes) / 1e6;
      },
      kRanks);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::stoi(argv[1]) : 8;
  const int64_t width = argc > 2 ? std::stoll(argv[2]) : 2048;
  const double psi = double(layers) * double(width * width + width);
  std::printf("%d x Linear(%ld, %ld): %.1f M parameters, Adam, %d ranks on cpu:0..%d\n", layers,
              long(width), long(width), psi / 1e6, kRanks, kRanks - 1);
  std::printf("%-8s %-16s %12s %9s %9s %9s\n", "mode", "formula", "predicted MB", "rank", "held MB",
              "peak MB");
  const double n = kRanks;
  const struct {
    int stage;
    const char* name;
    const char* formula;
    double bytes;
  } modes[] = {{0, "DDP", "20 Psi", 20 * psi},
               {1, "ZeRO-1", "8 Psi + 8 Psi/N", 8 * psi + 8 * psi / n},
               {2, "ZeRO-2", "4 Psi + 12 Psi/N", 4 * psi + 12 * psi / n}};
  for (const auto& m : modes) {
    const std::vector<Row> rows = measure(m.stage, layers, width);
    for (int r = 0; r < kRanks; ++r)
      std::printf("%-8s %-16s %12.1f %9d %9.1f %9.1f   held/predicted %.3f\n", r ? "" : m.name,
                  r ? "" : m.formula, m.bytes / 1e6, r, rows[size_t(r)].held, rows[size_t(r)].peak,
                  rows[size_t(r)].held * 1e6 / m.bytes);
  }
  return 0;
}
