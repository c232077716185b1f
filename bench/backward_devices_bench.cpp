// bench/backward_devices_bench.cpp — backward on two devices at once. Two independent heavy
// branches (a stack of Linear 1024 layers, batch 256) live on cpu:0 and cpu:1 and are summed at the
// end. The forward runs as the user's code runs it (on the calling thread); only backward is
// timed, in three ways, interleaved round by round:
//   devices: the engine's backward thread per device, the intra-op pool of TANDEM_NUM_THREADS
//            (default: all cores) shared fairly between the two devices;
//   serial1: every node on the calling thread, intra-op pool of 1 thread (one thread in all);
//   serialN: every node on the calling thread, the same intra-op pool as `devices`.
// Prints the median milliseconds and the ratios serial1/devices (the bar: >= 1.6 on 2 cores) and
// serialN/devices (what the device threads add over intra-op parallelism alone).
//   ./build-bench/bench/backward_devices_bench [--rounds N] [--quick]
#include <tandem/tandem.h>
#include <cstdio>
#include <memory>
#include <string>

#include "bench_util.h"

using namespace tandem;

namespace {

constexpr int64_t kWidth = 1024, kBatch = 256;

struct Branch : nn::Module {
  std::vector<std::unique_ptr<nn::Linear>> layers;
  explicit Branch(int depth) {
    for (int i = 0; i < depth; ++i) layers.push_back(std::make_unique<nn::Linear>(kWidth, kWidth));
  }
  void visit(nn::Visitor& v) override {
    for (size_t i = 0; i < layers.size(); ++i) v(std::to_string(i), *layers[i]);
  }
  Tensor forward(Tensor h) {
    for (auto& l : layers) h = relu((*l)(h));
    return h;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv, 9);
  const int depth = args.quick ? 2 : 4;
  const int threads = get_num_threads();
  bench::report_load();
  std::printf("two branches of %d x Linear(%ld, %ld), batch %ld, on cpu:0 and cpu:1; pool %d\n",
              depth, long(kWidth), long(kWidth), long(kBatch), threads);
  manual_seed(0);
  Branch b0(depth), b1(depth);
  b1.to(Device::cpu(1));
  const Tensor x0 = randn({kBatch, kWidth}), x1 = x0.to(Device::cpu(1));

  auto backward_ms = [&](bool device_threads, int pool) {
    set_num_threads(pool);
    set_backward_device_threads(device_threads);
    Tensor loss = b0.forward(x0).sum() + b1.forward(x1).sum().to(Device::cpu());
    const double t0 = bench::now_s();
    loss.backward();
    const double ms = (bench::now_s() - t0) * 1e3;
    b0.zero_grad();
    b1.zero_grad();
    return ms;
  };
  for (int w = 0; w < 2; ++w) {  // warm-up: page faults, worker threads, the pools
    backward_ms(true, threads);
    backward_ms(false, 1);
    backward_ms(false, threads);
  }
  std::vector<double> devices, serial1, serial_n;
  for (int r = 0; r < args.rounds; ++r) {
    devices.push_back(backward_ms(true, threads));
    serial1.push_back(backward_ms(false, 1));
    serial_n.push_back(backward_ms(false, threads));
  }
  set_backward_device_threads(true);
  set_num_threads(threads);
  const double d = bench::median(devices), s1 = bench::median(serial1),
               sn = bench::median(serial_n);
  std::printf("backward ms (median of %d): devices %.1f  serial1 %.1f  serial%d %.1f\n",
              args.rounds, d, s1, threads, sn);
  std::printf("ratio serial1/devices = %.2f   serial%d/devices = %.2f\n", s1 / d, threads, sn / d);
  return 0;
}
