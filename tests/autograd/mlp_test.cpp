// End to end: a 2-layer MLP fits a synthetic problem with plain gradient descent written against
// the tensor API alone (nn/ and optimizers come later), below a stated loss.
#include "support/expect.h"

using namespace tandem;

namespace {

// One-hot rows for integer labels, by comparing with arange (no special op needed).
Tensor one_hot(const Tensor& labels, int64_t classes) {
  return labels.unsqueeze(1).eq(arange(classes).unsqueeze(0)).to(kFloat32);
}

}  // namespace

TEST(EndToEnd, TwoLayerMlpFitsSyntheticClassesWithGradientDescent) {
  manual_seed(0);
  // 4 Gaussian blobs in 8-D; the label is the blob.
  const int64_t n = 512, d = 8, classes = 4, hidden = 32;
  Tensor centers = randn({classes, d}) * 2.0;
  Tensor labels = (rand({n}) * double(classes)).to(kInt64);
  Tensor x = one_hot(labels, classes).matmul(centers) + randn({n, d}) * 0.5;
  Tensor y = one_hot(labels, classes);

  Tensor w1 = (randn({hidden, d}) * (1.0 / std::sqrt(double(d)))).detach().requires_grad_();
  Tensor b1 = zeros({hidden}).requires_grad_();
  Tensor w2 =
      (randn({classes, hidden}) * (1.0 / std::sqrt(double(hidden)))).detach().requires_grad_();
  Tensor b2 = zeros({classes}).requires_grad_();
  auto loss_fn = [&] {
    Tensor logits = (x.matmul(w1.t()) + b1).relu().matmul(w2.t()) + b2;
    return -(y * logits.log_softmax(1)).sum({1}).mean();  // cross-entropy
  };
  const double initial = loss_fn().item();
  double loss = initial;
  for (int step = 0; step < 200; ++step) {
    Tensor l = loss_fn();
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
    l.backward();
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->sub_(p->grad(), 0.5);
    loss = l.item();
  }
  EXPECT_GT(initial, 1.0);
  EXPECT_LT(loss, 0.05) << "initial loss " << initial;
  Tensor logits = (x.matmul(w1.t()) + b1).relu().matmul(w2.t()) + b2;
  const double accuracy = logits.argmax(1).eq(labels).to(kFloat32).mean().item();
  EXPECT_GT(accuracy, 0.99);
}
