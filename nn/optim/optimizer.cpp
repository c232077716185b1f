// nn/optim/optimizer.cpp — what every optimizer shares: zero_grad and gradient clipping.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/nn/optim/optimizer.h>
#include <algorithm>
#include <cmath>

namespace tandem::optim {

void Optimizer::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos) return false;
  index = std::stoul(key.substr(6, dot - 6));
  name = key.substr(dot + 1);
  return true;
}

// Σ g² over the defined gradients in float64. One square_sums pass per device reads each
// gradient once, as it is (not through a float64 copy, a product and a sum per gradient); one copy
// of the per-gradient sums to the host per device (on a GPU each read waits for its queue to
// drain: a GPT-2 step once read 148 times); the total there in parameter order. Every order is
// fixed by the sizes, so the result is the same double on every run and at every thread count.
double grad_square_sum(const std::vector<Tensor>& parameters) {
  NoGradGuard no_grad;
  // Each device's gradients and their places in parameter order, devices in order of first use.
  struct OnDevice {
    Device device;
    std::vector<Tensor> grads;
    std::vector<size_t> places;
  };
  std::vector<OnDevice> by_device;
  size_t count = 0;
  for (const Tensor& p : parameters) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const OnDevice& d) { return d.device == g.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {g.device(), {}, {}});
    it->grads.push_back(g.contiguous());  // itself when it already is
    it->places.push_back(count++);
  }
  std::vector<double> values(count);
  for (const OnDevice& d : by_device) {
    Tensor sums = empty({int64_t(d.grads.size())}, {.dtype = kFloat64, .device = d.device});
    kernels(d.device).square_sums(d.grads, sums);
    const std::vector<double> host = sums.to_vector<double>();  // the one wait
    for (size_t k = 0; k < d.places.size(); ++k) values[d.places[k]] = host[k];
  }
  double total = 0;
  for (double v : values) total += v;
  return total;
}

void scale_grads_to_norm(const std::vector<Tensor>& parameters, double norm, double max_norm) {
  NoGradGuard no_grad;
  const double scale = max_norm / (norm + 1e-6);
  if (scale >= 1) return;
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    if (g.defined()) g.mul_(scale);
  }
}

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm) {
  const double norm = std::sqrt(grad_square_sum(parameters));
  scale_grads_to_norm(parameters, norm, max_norm);
  return norm;
}

}  // namespace tandem::optim
