// autograd/record.cpp — building the graph: nodes, edges, leaf accumulators, saved tensors.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/record.h>
#include <atomic>

namespace tandem {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1);
}

// The impl's slot keeps the state alive as long as the tensor, so a raw pointer from a load stays
// valid after the loaded shared_ptr is gone.
AutogradMeta* autograd_meta_if(const Tensor& t) { return t.impl().autograd.load().get(); }

AutogradMeta& autograd_meta(const Tensor& t) {
  auto& slot = t.impl().autograd;
  std::shared_ptr<AutogradMeta> meta = slot.load();
  if (meta) return *meta;
  // Two threads may get here at once: the first compare-and-swap wins and the other adopts its
  // state (compare_exchange_strong loads the winner into `meta`).
  auto fresh = std::make_shared<AutogradMeta>();
  if (slot.compare_exchange_strong(meta, fresh)) return *fresh;
  return *meta;
}

std::shared_ptr<Node> gradient_node(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  AutogradMeta& meta = autograd_meta(t);
  if (meta.grad_fn) return meta.grad_fn;
  std::lock_guard lk(meta.mutex);  // two forwards on two threads may share this leaf
  // A leaf: one accumulator per leaf, held by the graph (the leaf keeps only a weak reference,
  // so there is no cycle leaf -> node -> leaf).
  std::shared_ptr<Node> acc = meta.accumulator.lock();
  if (!acc) {
    acc = std::make_shared<Node>();
    acc->name = "accumulate_grad";
    // The ready queue runs the highest sequence number first, so an accumulator runs as soon as
    // it is ready (every gradient for its leaf has arrived): .grad is written and the
    // post-accumulate hooks fire early (DDP starts a bucket's all-reduce there, overlapping the
    // rest of backward), and the gradient buffer is freed early.
    acc->sequence_nr = UINT64_MAX;
    acc->leaf = t;
    acc->device = t.device();
    meta.accumulator = acc;
  }
  return acc;
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  return any_requires_grad(std::span<const Tensor>(inputs.begin(), inputs.size()));
}

bool any_requires_grad(std::span<const Tensor> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Tensor record(const char* name, Tensor output, std::initializer_list<Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward) {
  return record(name, std::move(output), std::span<const Tensor>(inputs.begin(), inputs.size()),
                saved, std::move(backward));
}

Tensor record(const char* name, Tensor output, std::span<const Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence_nr = next_sequence_nr();
  node->device = output.device();
  node->backward = std::move(backward);
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      node->next.push_back({});
      continue;
    }
    node->next.push_back({gradient_node(t), t.shape(), t.dtype(), t.device()});
  }
  node->saved.reserve(saved.size());
  for (const ToSave& s : saved) node->saved.emplace_back(s.name, s.tensor);
  output.impl().requires_grad = true;
  autograd_meta(output).grad_fn = std::move(node);
  return output;
}

}  // namespace tandem
