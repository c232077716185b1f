// tools/demo.cpp — `tandem demo`: the smallest complete training run. Four Gaussian blobs in 8-D,
// a 2-layer MLP, softmax cross-entropy, plain gradient descent written against the tensor API.
// It proves the build works end to end: forward, backward, an update, falling loss.
#include <tandem/tandem.h>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "commands.h"

namespace tandem::tools {

int run_demo(const DemoOptions& o) {
  manual_seed(o.seed);
  const int64_t d = 8, classes = 4, hidden = 32;
  Tensor centers = randn({classes, d}) * 2.0;
  Tensor labels = (rand({o.batch}) * double(classes)).to(kInt64);
  Tensor onehot = labels.unsqueeze(1).eq(arange(classes).unsqueeze(0)).to(kFloat32);
  Tensor x = onehot.matmul(centers) + randn({o.batch, d}) * 0.5;

  // Parameters, initialised as PyTorch's Linear does (uniform in ±1/√fan_in).
  auto init = [](Shape shape, int64_t fan_in) {
    return ((rand(shape) * 2.0 - 1.0) * (1.0 / std::sqrt(double(fan_in))))
        .detach()
        .requires_grad_();
  };
  Tensor w1 = init({hidden, d}, d), b1 = init({hidden}, d);
  Tensor w2 = init({classes, hidden}, hidden), b2 = init({classes}, hidden);
  std::vector<Tensor*> params{&w1, &b1, &w2, &b2};

  std::printf(
      "tandem demo: MLP %lld-%lld-%lld on %lld synthetic examples, %d steps of gradient descent "
      "(lr %g)\n",
      (long long)d, (long long)hidden, (long long)classes, (long long)o.batch, o.steps, o.lr);
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  Tensor logits;
  for (int step = 1; step <= o.steps; ++step) {
    logits = (x.matmul(w1.t()) + b1).relu().matmul(w2.t()) + b2;
    Tensor l = -(onehot * logits.log_softmax(1)).sum({1}).mean();  // cross-entropy
    for (Tensor* p : params) p->set_grad(Tensor());
    l.backward();
    {
      NoGradGuard no_grad;
      for (Tensor* p : params) p->sub_(p->grad(), o.lr);
    }
    loss = l.item();
    if (step == 1 || step % 50 == 0 || step == o.steps)
      std::printf("step %4d  loss %.4f\n", step, loss);
  }
  const double accuracy = logits.argmax(1).eq(labels).to(kFloat32).mean().item();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "final loss %.4f, training accuracy %.1f%%, %.2f s (%.0f steps/s), peak memory on cpu %.1f "
      "KiB\n",
      loss, 100 * accuracy, secs, o.steps / secs,
      double(memory_stats(Device::cpu()).peak_allocated_bytes) / 1024);
  return std::isfinite(loss) ? 0 : 1;
}

}  // namespace tandem::tools
