// examples/mnist_ddp — the reference CNN trained with DistributedDataParallel: one process per
// device, each on its own share of every batch (DistributedSampler), gradients averaged by
// bucketed all-reduces that overlap backward. Rank 0 evaluates and saves. Launch it like torchrun:
//
//   tandem fetch mnist
//   tandem launch --standalone --nproc-per-node 2 -- build/examples/mnist_ddp datasets/mnist
//        [epochs] [max steps per epoch] [seed] [trace dir]
//
// The global batch is 64 (32 per rank with 2 ranks), so the run follows the single-device recipe
// of examples/mnist_cnn. With a trace dir, each rank writes trace-rank<N>.json (open in Perfetto).
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <string>

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

double evaluate(Cnn& model, const data::Dataset& test, Device device) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(test, {.batch_size = 500});
  int64_t correct = 0;
  for (auto& [x, y] : loader)
    correct += int64_t(model.forward(x.to(device)).argmax(1).eq(y.to(device)).sum().item());
  model.train();
  return double(correct) / double(test.size());
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "datasets/mnist";
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 5;
  const int64_t max_steps = argc > 3 ? std::atoll(argv[3]) : -1;  // for smoke runs
  const uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 0;
  const std::string trace_dir = argc > 5 ? argv[5] : "";
  try {
    // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT come from `tandem launch` (or torchrun).
    auto group = parallel::init_process_group();
    const int rank = group->rank(), world = group->size();
    const Device device = parallel::local_device();  // cuda:LOCAL_RANK, or cpu:LOCAL_RANK
    if (!trace_dir.empty()) {
      trace::enable();
      trace::set_process(rank, "rank " + std::to_string(rank));
    }
    manual_seed(seed);  // DDP copies rank 0's weights to the others anyway
    data::MNIST train(dir, data::Split::Train), test(dir, data::Split::Test);
    // Every rank draws the same permutation per epoch and takes every world-th example of it.
    auto sampler = std::make_shared<data::DistributedSampler>(
        train.size(), data::DistributedSamplerOptions{.seed = seed});
    data::DataLoader loader(train, {.batch_size = 64 / world, .num_workers = 1}, sampler);

    Cnn model;
    model.to(device);
    parallel::DistributedDataParallel ddp(model);  // same model everywhere? then broadcast
    optim::Adam opt(model.parameters(), {.lr = 1e-3});
    if (rank == 0)
      std::printf("%d ranks, %lld parameters\n", world, (long long)model.parameter_count());

    for (int epoch = 1; epoch <= epochs; ++epoch) {
      loader.set_epoch(epoch);  // a new shuffle, the same on every rank
      double total = 0;
      int64_t steps = 0;
      for (auto& [x, y] : loader) {
        Tensor loss = cross_entropy(ddp(x.to(device)), y.to(device));
        opt.zero_grad();
        loss.backward();  // returns once the averaged gradients are in .grad
        opt.step();
        total += loss.item();
        if (++steps == max_steps) break;
      }
      // Each rank saw different examples: average the loss for the log line.
      Tensor mean_loss = full({1}, total / double(steps), {.device = device});
      group->all_reduce(mean_loss, ReduceOp::Mean)->wait();
      if (rank == 0)
        std::printf("epoch %d: train loss %.4f, held-out accuracy %.2f%%\n", epoch,
                    mean_loss.item(), 100 * evaluate(model, test, device));
    }
    if (rank == 0) {
      nn::save_model("mnist_ddp.safetensors", model);
      std::printf("saved mnist_ddp.safetensors\n");
    }
    if (!trace_dir.empty())
      trace::write_chrome_trace(trace_dir + "/trace-rank" + std::to_string(rank) + ".json");
    parallel::destroy_process_group();
  } catch (const Error& e) {
    std::fprintf(stderr, "mnist_ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
