// nn/optim/optimizer.cpp — what every optimizer shares: zero_grad and gradient clipping.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
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

// Each gradient's Σ g² in float64 on its own device; then one copy to the host per device, not one
// read per gradient (on a GPU each read waited for the queue to drain: a GPT-2 step read 148
// times), and the sum there in parameter order, so the result is the same double as ever.
double grad_square_sum(const std::vector<Tensor>& parameters) {
  NoGradGuard no_grad;
  std::vector<Tensor> squares;  // [] float64, one per defined gradient, in parameter order
  for (const Tensor& p : parameters) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor g64 = g.to(DType::f64);
    squares.push_back((g64 * g64).sum());
  }
  // Which squares each device holds, devices in order of first appearance.
  std::vector<std::pair<Device, std::vector<size_t>>> by_device;
  for (size_t i = 0; i < squares.size(); ++i) {
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& d) { return d.first == squares[i].device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {squares[i].device(), {}});
    it->second.push_back(i);
  }
  std::vector<double> values(squares.size());
  for (const auto& [device, indices] : by_device) {
    std::vector<Tensor> on_device;
    for (size_t i : indices) on_device.push_back(squares[i]);
    const std::vector<double> host = stack(on_device).to_vector<double>();  // the one wait
    for (size_t k = 0; k < indices.size(); ++k) values[indices[k]] = host[k];
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
