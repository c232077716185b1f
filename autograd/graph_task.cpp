// autograd/graph_task.cpp — summing the gradients that flow into a node, and the walks over the
// graph that a task makes before it runs.
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

void GraphTask::count_dependencies(Node* root, Device (*thread_of)(const Node&)) {
  std::unordered_set<Device> threads, cpus;
  std::vector<Node*> stack{root};
  dependencies[root] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    const Device thread = thread_of(*n);
    threads.insert(thread);
    if (thread.is_cpu()) cpus.insert(thread);
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      if (thread_of(*e.node) != thread) hands_off.insert(n);
      if (dependencies[e.node.get()]++ == 0) stack.push_back(e.node.get());
    }
  }
  keep_parts = threads.size() > 1;
  cpu_threads = std::max<int>(1, int(cpus.size()));
  this->threads.assign(threads.begin(), threads.end());
  if (defer_weight_grads)
    for (const auto& [n, count] : dependencies)
      if (count > 1 && n->is_accumulator()) shared_leaves.insert(n);
}

// Children first, with an explicit stack: graphs of thousands of nodes are deeper than the
// thread's stack.
void GraphTask::mark_needed(Node* root) {
  std::unordered_set<Node*> seen{root};
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    Node* n = stack.back().first;
    const size_t i = stack.back().second++;
    if (i < n->next.size()) {
      Node* child = n->next[i].node.get();
      if (child && seen.insert(child).second) stack.emplace_back(child, 0);
      continue;
    }
    bool need = capture.contains(n);
    for (const Edge& e : n->next) need |= e.node && needed.contains(e.node.get());
    if (need) needed.insert(n);
    stack.pop_back();
  }
}

}  // namespace tandem
