// nn/dropout.cpp — the mask is a constant of the graph (rand >= p), so the gradient of
// x·mask/(1 − p) is mask/(1 − p) with no special backward.
#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/dropout.h>

namespace tandem::nn {

Dropout::Dropout(double p) : p(p) {
  TD_CHECK_VALUE(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], but got ", p);
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p == 0) return x;
  return with_generator(generator, x.device(), [&] {
    return uniforms && p < 1 ? dropout_where(x, p, uniforms(x.shape(), x.options()))
                             : dropout(x, p, true);
  });
}

Tensor dropout(const Tensor& x, double p, bool training) {
  TD_CHECK_VALUE(p >= 0 && p <= 1, "dropout: p must be in [0, 1], but got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  return dropout_where(x, p, rand(x.shape(), x.options()));
}

Tensor dropout_where(const Tensor& x, double p, const Tensor& uniforms) {
  const Tensor keep = uniforms.ge(p).to(x.dtype());
  return x * (keep * (1.0 / (1.0 - p)));
}

Tensor with_generator(const std::shared_ptr<Generator>& generator, Device device,
                      const std::function<Tensor()>& fn) {
  if (generator == nullptr) return fn();
  // The generator stands in for the device's, for this thread only: the ops inside draw from it.
  // A checkpointed block's recompute hands out a private copy (own_generator) that draws the
  // forward's numbers again; either way the generator ends where the draws leave it. Not noted
  // as the device's draws, since they are not.
  Generator& own = own_generator(*generator);
  ReplayGenerators scope({{device, own.get_state()}}, {}, /*noted=*/false);
  Tensor y = fn();
  own.set_state(ReplayGenerators::find(device)->get_state());
  return y;
}

}  // namespace tandem::nn
