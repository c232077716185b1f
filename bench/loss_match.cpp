// bench/loss_match.cpp — Tandem's side of "the same initial weights on both sides and the losses
// after N steps compared" (issue 35): for each model it writes the initial state dict and the
// batches to DIR/<model>.safetensors, trains N steps on them, and prints the losses. PyTorch's
// side (bench/gpu_bench_torch.py --loss-match DIR) loads the same file into its model, by the same
// names, trains the same steps and prints its losses; bench/gpu_bench_report.py sets them side by
// side. The models: the MNIST reference CNN with Adam, and ResNet-18 on 32×32 images (the CIFAR
// stem) with SGD, momentum and weight decay, batch norm in training mode.
//   loss_match --dir DIR [--device cuda:0] [--batch 256] [--steps 10] [--dtype float64]
#include <tandem/tandem.h>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "reference_models.h"

using namespace tandem;

namespace {

struct Options {
  std::string dir;
  Device device = Device::cpu();
  int64_t batch = 256, steps = 10;
  DType dtype = kFloat32;  // float64 shows what is left when rounding is not in the way
};

// `steps` batches of class labels in [0, classes), from a fixed seed.
Tensor labels(int64_t steps, int64_t batch, int64_t classes) {
  std::mt19937_64 gen(7);
  std::vector<int64_t> v(size_t(steps * batch));
  for (int64_t& c : v) c = int64_t(gen() % uint64_t(classes));
  return from_vector(v, {steps, batch});
}

// Writes the model's initial state dict and `steps` batches, then trains on them; prints
// "loss_<name>_step<k> value" for every step. The optimizer is made after the move to the device.
template <typename M, typename MakeOpt>
void run(const std::string& name, M& model, MakeOpt make_opt, const Shape& image, int64_t classes,
         const Options& o) {
  Shape xs{o.steps, o.batch};
  xs.insert(xs.end(), image.begin(), image.end());
  const Tensor x = randn(xs).to(o.dtype), y = labels(o.steps, o.batch, classes);
  model.to(o.dtype);
  nn::StateDict file = model.state_dict();
  for (auto& [k, t] : file) k = "weight." + k;
  file.emplace_back("x", x);
  file.emplace_back("y", y);
  save_safetensors(o.dir + "/" + name + ".safetensors", file);
  model.to(o.device);
  model.train();
  auto opt = make_opt(model.parameters());
  for (int64_t s = 0; s < o.steps; ++s) {
    opt.zero_grad();
    const Tensor loss =
        cross_entropy(model.forward(x.select(0, s).to(o.device)), y.select(0, s).to(o.device));
    loss.backward();
    opt.step();
    std::printf("loss_%s_step%lld %.9g\n", name.c_str(), (long long)(s + 1), loss.item());
    std::fflush(stdout);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--dir") {
      o.dir = v;
    } else if (k == "--device") {
      o.device = Device(v);
    } else if (k == "--batch") {
      o.batch = std::stoll(v);
    } else if (k == "--steps") {
      o.steps = std::stoll(v);
    } else if (k == "--dtype" && (v == "float32" || v == "float64")) {
      o.dtype = v == "float64" ? kFloat64 : kFloat32;
    } else {
      o.dir.clear();
      break;
    }
  }
  if (o.dir.empty() || argc % 2 == 0) {
    std::fprintf(
        stderr,
        "usage: %s --dir DIR [--device cuda:0] [--batch 256] [--steps 10] [--dtype float64]\n",
        argv[0]);
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  manual_seed(0);
  bench::ReferenceCnn cnn;
  run(
      "cnn", cnn, [](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-3}); },
      {1, 28, 28}, 10, o);
  manual_seed(1);
  nn::Sequential resnet = nn::resnet18({.num_classes = 10, .small_images = true});
  run(
      "resnet18", resnet,
      [](std::vector<Tensor> p) {
        return optim::SGD(std::move(p), {.lr = 0.01, .momentum = 0.9, .weight_decay = 5e-4});
      },
      {3, 32, 32}, 10, o);
  return 0;
}
