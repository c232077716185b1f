// parallel/clip_grad_norm.cpp — local squares, one all-reduce, optim's scaling.
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <cmath>

namespace tandem::parallel {

double clip_grad_norm_across(const std::vector<Tensor>& parameters, Communicator& group,
                             double max_norm) {
  const Device device = parameters.empty() ? Device::cpu() : parameters.front().device();
  Tensor total =
      full({1}, optim::grad_square_sum(parameters), {.dtype = kFloat64, .device = device});
  group.all_reduce(total, ReduceOp::Sum)->wait();
  const double norm = std::sqrt(total.to(Device::cpu()).data<double>()[0]);
  optim::scale_grads_to_norm(parameters, norm, max_norm);
  return norm;
}

}  // namespace tandem::parallel
