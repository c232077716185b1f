// autograd/graph_task.cpp — summing the gradients that flow into a node.
#include <tandem/autograd/graph_task.h>
#include <tandem/core/kernels/kernels.h>
#include <algorithm>

namespace tandem {
namespace {

Tensor sum_grads(const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.shape(), a.options());
  kernels(a.device()).binary(BinaryOp::Add, a, b, out);
  return out;
}

}  // namespace

void InputBuffer::add(uint64_t producer, size_t edge, Tensor grad, bool keep_parts) {
  if (!grad.defined()) return;  // a weight gradient put off (defer_weight_grads): nothing to add
  if (keep_parts) {
    parts_.push_back({producer, edge, std::move(grad)});
    return;
  }
  sum_ = sum_.defined() ? sum_grads(sum_, grad) : std::move(grad);
}

Tensor InputBuffer::take() {
  if (parts_.empty()) return std::move(sum_);
  // The order one thread would have summed them in: latest producer first, then by input.
  std::sort(parts_.begin(), parts_.end(), [](const Part& a, const Part& b) {
    return a.producer != b.producer ? a.producer > b.producer : a.edge < b.edge;
  });
  Tensor sum = std::move(parts_[0].grad);
  for (size_t i = 1; i < parts_.size(); ++i) sum = sum_grads(sum, parts_[i].grad);
  parts_.clear();
  return sum;
}

}  // namespace tandem
