// nn/optim/optimizer.cpp — what every optimizer shares: zero_grad and gradient clipping.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/optim/optimizer.h>
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

double grad_square_sum(const std::vector<Tensor>& parameters) {
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : parameters) {
    const Tensor g = p.grad();
    if (g.defined()) total += (g.to(DType::f64) * g.to(DType::f64)).sum().item();
  }
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
