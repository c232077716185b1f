// examples/sharding_memory — what each device holds under DDP, ZeRO-1, ZeRO-2 and ZeRO-3
// (fully_shard), beside the formula. The model is 8 × Linear(2048, 2048) (Ψ = 33.6 M parameters,
// float32) trained with Adam by 4 ranks, threads on cpu:0..3 (the in-process communicator), batch 8
// per rank. For each mode and rank: the bytes held after a step and the peak during the second step
// (the first creates Adam's state), in MB, and the predicted bytes:
//   DDP     4Ψ parameters + 4Ψ gradients + 8Ψ Adam                         = 16Ψ
//           (+ 4Ψ bucket copy, 20Ψ, where the backend cannot reduce the gradients where they
//           lie: Gloo, NCCL; threads, as here, and shared memory reduce them in place)
//   DDP with gradient_as_bucket_view: .grad is the bucket's slice          = 16Ψ
//   ZeRO-1  4Ψ parameters + 4Ψ buckets (the averaged chunk inside) + 8Ψ/N Adam = 8Ψ + 8Ψ/N
//   ZeRO-2  4Ψ parameters + (4Ψ chunk + 8Ψ Adam) / N                       = 4Ψ + 12Ψ/N
//   ZeRO-3  (4Ψ shards + 4Ψ their gradients + 8Ψ Adam) / N                 = 16Ψ/N
// The peak adds what a step holds for a moment: activations (small here), the gradient being
// copied into its bucket, under ZeRO-2 the (at most two) buckets being reduced, and under ZeRO-3
// the units in flight (one layer each: its all-gather buffer and whole parameters, the next
// layer's prefetch, a layer's whole gradient, its reduce-scatter buffer and the previous
// layer's, still on the wire).
//   build/examples/sharding_memory [layers] [width]
#include <tandem/tandem.h>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace tandem;

namespace {

constexpr int kRanks = 4;
constexpr int64_t kBatch = 8;

// `layers` × Linear(width, width), ReLU between: one unit per Linear under fully_shard.
nn::Sequential stack(int n, int64_t width) {
  nn::Sequential s;
  for (int i = 0; i < n; ++i) {
    if (i) s.push_back("relu" + std::to_string(i), nn::ReLU());
    s.push_back(std::to_string(i), nn::Linear(width, width));
  }
  return s;
}

struct Row {
  double held = 0, peak = 0;  // MB
  bool bucket_copy = false;   // DDP packed its buckets (it could not reduce in place)
};

// Two Adam steps with DDP at `stage` (0: plain, -1: with gradient_as_bucket_view; 3: fully_shard)
// on 4 ranks; each rank's bytes after
// the first step and its peak during the second.
std::vector<Row> measure(int stage, int layers, int64_t width) {
  std::vector<nn::Sequential> models;
  for (int r = 0; r < kRanks; ++r) {
    manual_seed(0);
    models.push_back(stack(layers, width));
    models.back().to(Device::cpu(r));
  }
  std::vector<Row> rows(kRanks);
  parallel::spawn_threads(
      [&](std::shared_ptr<parallel::Communicator> group) {
        const int r = group->rank();
        const Device dev = Device::cpu(r);
        std::unique_ptr<parallel::DistributedDataParallel<nn::Sequential>> ddp;
        std::unique_ptr<parallel::FullyShardedModule> fsdp;
        std::unique_ptr<optim::Optimizer> opt;
        const optim::AdamOptions adam{.lr = 1e-4};
        if (stage == 3) {
          fsdp = parallel::fully_shard(std::move(models[size_t(r)]), {.group = group});
          opt = std::make_unique<optim::Adam>(fsdp->parameters(), adam);
        } else {
          nn::Sequential& model = models[size_t(r)];
          ddp = std::make_unique<parallel::DistributedDataParallel<nn::Sequential>>(
              model, parallel::DDPOptions{.group = group,
                                          .zero_stage = std::max(stage, 0),
                                          .gradient_as_bucket_view = stage < 0});
          if (stage > 0)
            opt = parallel::zero_optimizer<optim::Adam>(*ddp, model.parameters(), adam);
          else
            opt = std::make_unique<optim::Adam>(model.parameters(), adam);
        }
        for (int step = 0; step < 2; ++step) {
          if (step == 1) reset_peak_memory_stats(dev);
          opt->zero_grad();
          {
            const Tensor x = randn({kBatch, width}, {.device = dev});
            const Tensor y = fsdp ? (*fsdp)(x) : (*ddp)(x);
            (y * y).mean().backward();
          }
          opt->step();
          group->barrier()->wait();  // every rank is done with the step's collectives
          if (step == 0) rows[size_t(r)].held = double(memory_stats(dev).allocated_bytes) / 1e6;
          if (ddp) rows[size_t(r)].bucket_copy = !ddp->reducer().reduces_in_place();
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
  const struct {
    int stage;
    const char* name;
    const char* formula;
  } modes[] = {{0, "DDP", "16 Psi"},
               {-1, "DDP view", "16 Psi"},
               {1, "ZeRO-1", "8 Psi + 8 Psi/N"},
               {2, "ZeRO-2", "4 Psi + 12 Psi/N"},
               {3, "ZeRO-3", "16 Psi/N"}};
  for (const auto& m : modes) {
    const std::vector<Row> rows = measure(m.stage, layers, width);
    // The library's formula (parallel/ddp/state_bytes.h): float32, Adam's two states; the bucket
    // copy counted where the reducer made one.
    const bool copy = m.stage == 0 && rows[0].bucket_copy;  // a bucket view is the .grad
    const double bytes =
        parallel::state_bytes(std::max(m.stage, 0), psi, 4, 2, kRanks, copy).total();
    for (int r = 0; r < kRanks; ++r)
      std::printf("%-8s %-16s %12.1f %9d %9.1f %9.1f   held/predicted %.3f\n", r ? "" : m.name,
                  r ? "" : (copy ? "20 Psi (bucket copy)" : m.formula), bytes / 1e6, r,
                  rows[size_t(r)].held, rows[size_t(r)].peak, rows[size_t(r)].held * 1e6 / bytes);
  }
  return 0;
}
