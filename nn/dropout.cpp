// nn/dropout.cpp — the mask is a constant of the graph (rand >= p), so the gradient of
// x·mask/(1 − p) is mask/(1 − p) with no special backward.
#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/dropout.h>

namespace tandem::nn {

Dropout::Dropout(double p) : p(p) {
  TD_CHECK_VALUE(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], but got ", p);
}

Tensor dropout(const Tensor& x, double p, bool training) {
  TD_CHECK_VALUE(p >= 0 && p <= 1, "dropout: p must be in [0, 1], but got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  const Tensor keep = rand(x.shape(), x.options()).ge(p).to(x.dtype());
  return x * (keep * (1.0 / (1.0 - p)));
}

}  // namespace tandem::nn
