// autograd/record.cpp — building the graph: nodes, edges, leaf accumulators, saved tensors.
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/record.h>
#include <tandem/core/cuda_device.h>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace tandem {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1);
}

AutogradMeta* autograd_meta_if(const Tensor& t) {
  return t.impl().autograd_ptr.load(std::memory_order_acquire);
}

AutogradMeta& autograd_meta(const Tensor& t) {
  TensorImpl& impl = t.impl();
  if (AutogradMeta* meta = impl.autograd_ptr.load(std::memory_order_acquire)) return *meta;
  // First use. Threads racing here take the same lock (one of a few, picked by address, so that
  // unrelated tensors seldom wait on each other); the first makes the state, the rest find it.
  static std::mutex locks[16];
  std::lock_guard lk(locks[(reinterpret_cast<uintptr_t>(&impl) >> 6) % 16]);
  if (AutogradMeta* meta = impl.autograd_ptr.load(std::memory_order_relaxed)) return *meta;
  impl.autograd = std::make_shared<AutogradMeta>();
  impl.autograd_ptr.store(impl.autograd.get(), std::memory_order_release);
  return *impl.autograd;
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
    if (acc->device.is_cuda()) acc->stream = cuda::current_stream_handle(acc->device.index());
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

namespace {

Tensor record_node(const char* name, Tensor output, std::span<const Tensor> inputs,
                   std::initializer_list<ToSave> saved, BackwardFn backward,
                   WeightGrad weight_grad) {
  if (!any_requires_grad(inputs)) return output;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->sequence_nr = next_sequence_nr();
  node->device = output.device();
  if (node->device.is_cuda()) node->stream = cuda::current_stream_handle(node->device.index());
  node->backward = std::move(backward);
  node->weight_grad = weight_grad;
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      node->next.push_back({});
      continue;
    }
    node->next.push_back({gradient_node(t), t.shape(), t.dtype(), t.device()});
  }
  node->saved.reserve(saved.size());
  for (const ToSave& s : saved)
    node->saved.emplace_back(s.name, s.tensor,
                             s.tensor.defined() && s.tensor.impl_ptr() == output.impl_ptr());
  output.impl().requires_grad = true;
  autograd_meta(output).grad_fn = std::move(node);
  return output;
}

std::span<const Tensor> as_span(std::initializer_list<Tensor> inputs) {
  return {inputs.begin(), inputs.size()};
}

}  // namespace

Tensor record(const char* name, Tensor output, std::initializer_list<Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward) {
  return record_node(name, std::move(output), as_span(inputs), saved, std::move(backward), {});
}

Tensor record(const char* name, Tensor output, std::initializer_list<Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward, WeightGrad weight_grad) {
  return record_node(name, std::move(output), as_span(inputs), saved, std::move(backward),
                     weight_grad);
}

Tensor record(const char* name, Tensor output, std::span<const Tensor> inputs,
              std::initializer_list<ToSave> saved, BackwardFn backward) {
  return record_node(name, std::move(output), inputs, saved, std::move(backward), {});
}

}  // namespace tandem
