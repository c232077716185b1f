// parallel/all_reduce_gradients.cpp — flatten, reduce, copy back.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/parallel/all_reduce_gradients.h>

namespace tandem::parallel {

void all_reduce_gradients(const std::vector<Tensor>& parameters, Communicator& group, ReduceOp op) {
  if (group.size() == 1) return;
  NoGradGuard no_grad;
  std::vector<Tensor> grads, flat;
  for (const Tensor& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  for (const Tensor& g : grads) flat.push_back(g.contiguous().reshape({-1}));
  Tensor all = cat(flat, 0);
  group.all_reduce(all, op)->wait();
  int64_t at = 0;
  for (Tensor& g : grads) {
    g.copy_(all.narrow(0, at, g.numel()).reshape(g.shape()));
    at += g.numel();
  }
}

}  // namespace tandem::parallel
