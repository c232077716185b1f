// autograd/engine.cpp — reverse-mode backward. Count each node's consumers, then run nodes whose
// gradients are complete, latest-recorded first, each on its device's thread (device_workers.h);
// sum the gradients flowing into each node (graph_task.h); let accumulator nodes (one per leaf) add
// into .grad under the leaf's lock and fire the post-accumulate hooks. Kernels write, the engine
// alone accumulates. Runs with grad mode off: there is no double backward. With
// defer_weight_grads, an op's weight-gradient part is queued on the task instead of run
// (deferred_weight_grads.h): the engine decides that, not the op. Which task a thread works for,
// and the callbacks queued to it, are current_task.h's.
#include <pthread.h>
#include <tandem/autograd/autograd_meta.h>
#include <tandem/autograd/current_task.h>
#include <tandem/autograd/device_workers.h>
#include <tandem/autograd/engine.h>
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/graph_task.h>
#include <tandem/core/cuda_device.h>
#include <tandem/core/kernels/kernels.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/core/thread_pool.h>
#include <tandem/core/trace.h>
#include <algorithm>
#include <optional>
#include <unordered_set>

namespace tandem {
namespace {

std::atomic<bool> g_device_threads{true};

// The queue this thread runs backward nodes from: its device's on a backward worker, else one of
// its own (for the plain `cpu` nodes of the backward it calls).
thread_local std::shared_ptr<WorkQueue> t_queue;

// One backward worker per device other than the plain `cpu`, for the life of the process (never
// destroyed: no exit-time destructor may wait for a worker blocked on its queue).
DeviceWorkers& backward_workers() {
  static DeviceWorkers* workers = new DeviceWorkers(
      "bw", [](const WorkerKey&, std::shared_ptr<WorkQueue> queue) { t_queue = std::move(queue); });
  return *workers;
}

std::shared_ptr<WorkQueue> local_queue() {
  if (!t_queue) t_queue = std::make_shared<WorkQueue>();
  return t_queue;
}

// A forked child's forking thread keeps its thread_locals, but its queue may be mid-use by a
// worker that is gone.
[[maybe_unused]] const int g_forget_queue_at_fork =
    ::pthread_atfork(nullptr, nullptr, [] { t_queue = nullptr; });

bool runs_on_caller(Device d) {  // meta:N as cpu:N, so that it frees in the same order
  return ((d.is_cpu() || d.is_meta()) && d.index() == 0) ||
         !g_device_threads.load(std::memory_order_relaxed);
}

void evaluate(std::shared_ptr<GraphTask> task, Node* node, InputBuffer& grad);

// The thread a node runs on: the caller's (as cpu:0) or its device's backward worker.
Device thread_of(const Node& n) { return runs_on_caller(n.device) ? Device::cpu(0) : n.device; }

// Queues `node` on its device's thread, latest-recorded first: within one device the nodes of a
// task run as on one thread. One exception, in a task spread over several threads: a node whose
// gradients go to another thread (a copy between devices) runs before its own thread's other
// nodes, so the other thread starts at once instead of when this one runs out of work. The
// order of the sums does not change with it (keep_parts, graph_task.h).
void push_ready(const std::shared_ptr<GraphTask>& task, Node* node, InputBuffer grad) {
  // The task found its threads' queues before it started: no lock here, per node.
  const auto known = task->queues.find(thread_of(*node));
  auto queue = known != task->queues.end()    ? known->second
               : runs_on_caller(node->device) ? task->owner_queue
                                              : backward_workers().queue({node->device});
  const uint64_t handoff = task->hands_off.contains(node) ? uint64_t(1) << 63 : 0;
  task->outstanding.fetch_add(1);  // counted before it can run; uncounted if it never will
  try {
    queue->push(
        [task, node, grad = std::move(grad)]() mutable { evaluate(std::move(task), node, grad); },
        node->sequence_nr | handoff);
  } catch (...) {
    task->outstanding.fetch_sub(1);
    throw;
  }
}

// Hands input `edge` of `producer` its gradient; queues the consumer once it has them all.
void deliver(const std::shared_ptr<GraphTask>& task, const Node& producer, size_t edge,
             Tensor grad) {
  Node* to = producer.next[edge].node.get();
  // A CUDA gradient was made on the current stream here; the consumer's stream (its forward's)
  // must wait for it, as PyTorch's InputBuffer does.
  if (grad.defined() && grad.device().is_cuda()) {
    const int d = grad.device().index();
    cuda::stream_wait(d, to->stream, cuda::current_stream_handle(d));
  }
  InputBuffer complete;
  {
    std::lock_guard lk(task->mutex);
    InputBuffer& buffer = task->buffers[to];
    buffer.add(producer.sequence_nr, edge, std::move(grad), task->keep_parts);
    if (--task->dependencies[to] > 0) return;
    complete = std::move(buffer);
    task->buffers.erase(to);
  }
  push_ready(task, to, std::move(complete));
}

void run_node(const std::shared_ptr<GraphTask>& task, Node* node, Tensor dy) {
  // An accumulator whose every gradient was deferred: run() accumulates (and runs its hooks).
  if (node->is_accumulator() && !dy.defined()) return;
  auto hooks = node->is_accumulator() ? autograd_meta(node->leaf).hooks.snapshot()
                                      : node->pre_hooks.snapshot();
  for (auto& hook : hooks) {
    Tensor replaced = hook(dy);
    if (replaced.defined()) dy = replaced;
  }
  if (!task->needed.empty()) {  // autograd::grad: keep the answers, run only what leads to more
    if (auto it = task->capture.find(node); it != task->capture.end()) {
      std::lock_guard lk(task->mutex);
      for (size_t k : it->second) task->captured[k] = dy;
    }
    bool onward = false;
    for (const Edge& e : node->next) onward |= e.node && task->needed.contains(e.node.get());
    if (node->is_accumulator() || !onward) return;
  }
  if (node->is_accumulator()) return autograd::detail::add_to_grad(node->leaf, std::move(dy));
  TD_CHECK_AS(AutogradError, !node->released, "backward through the graph a second time (at '",
              node->name,
              "'): its saved tensors were freed after the first backward\n"
              "  hint: pass retain_graph = true to the first backward() if you need to call it "
              "twice");
  Saved saved;
  saved.reserve(node->saved.size());
  for (const SavedTensor& s : node->saved) saved.push_back(s.unpack(node->name));
  NeedsGrad need(node->next.size());
  for (size_t i = 0; i < need.size(); ++i) need[i] = node->next[i].node != nullptr;
  // defer_weight_grads: the op's weight-gradient part waits on the task when its weight is a leaf
  // (deferred_weight_grads.h); backward computes the rest.
  // A leaf that gets other gradients in this backward too (a tied weight) is not: its hooks
  // would fire once here and once in run().
  const WeightGrad& w = node->weight_grad;
  const bool defer = task->defer_weight_grads && w.fn && need[w.input] &&
                     node->next[w.input].node->is_accumulator() &&
                     !task->shared_leaves.contains(node->next[w.input].node.get());
  if (defer) need[w.input] = false;
  dy = detail::contiguous(dy);
  const int64_t t0 = trace::enabled() ? trace::now_us() : -1;  // a span per op when tracing
  Grads grads = node->backward(dy, need, saved);
  if (defer) {
    std::lock_guard lk(task->mutex);
    // dy as rows (its leading dims flattened), so that the parts of backward passes whose outputs
    // differ in their leading dims still concatenate along dim 0.
    task->deferred.add({node->next[w.input].node->leaf, w.fn, dy.reshape({-1, dy.size(-1)}),
                        saved[w.saved], node->sequence_nr});
  }
  if (t0 >= 0)
    trace::record(str(node->name, " [", node->device, "]"), "backward", t0, trace::now_us());
  saved.clear();
  dy = Tensor();
  TD_INTERNAL_ASSERT(grads.size() == node->next.size(), "backward of '", node->name, "' returned ",
                     grads.size(), " gradients for ", node->next.size(), " inputs");
  // Free the saved tensors now, not when the graph dies. A node that saved nothing stays
  // runnable, as in PyTorch: a parameter's cast that autocast keeps for the region feeds several
  // separate backward calls (a pipeline's micro-batches, accumulation steps).
  if (!task->retain_graph && !node->saved.empty()) {
    node->backward = nullptr;
    node->saved.clear();
    node->released = true;
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const Edge& e = node->next[i];
    if (!e.node) continue;
    Tensor& g = grads[i];
    // A deferred weight gradient still counts as delivered, so the leaf's accumulator runs once
    // its other gradients (a tied weight used elsewhere) are in; run() accumulates the rest.
    if (defer && i == w.input) {
      deliver(task, *node, i, Tensor());
      continue;
    }
    // An op marked so may leave a leaf's gradient undefined: nothing flows into it from here
    // (node.h, gradients_elsewhere). Any other missing gradient is a bug in the op.
    if (!g.defined()) {
      TD_INTERNAL_ASSERT(node->gradients_elsewhere && e.node->is_accumulator(), "backward of '",
                         node->name, "' gave no gradient for input ", i);
      deliver(task, *node, i, Tensor());
      continue;
    }
    TD_INTERNAL_ASSERT(g.shape() == e.shape && g.dtype() == e.dtype && g.device() == e.device,
                       "backward of '", node->name, "': gradient for input ", i, " is ", g.shape(),
                       " ", g.dtype(), " on ", g.device(), ", expected ", e.shape, " ", e.dtype,
                       " on ", e.device);
    deliver(task, *node, i, std::move(g));
  }
}

// Runs one queued node (or drops it, once its task has failed) and wakes the task's owner when it
// was the last.
void evaluate(std::shared_ptr<GraphTask> task, Node* node, InputBuffer& grad) {
  if (!task->failed) {
    ::tandem::detail::CurrentTask current(task);
    try {
      ThreadLocalStateGuard state(task->state);
      // A CUDA node runs on its forward's stream; one other than the caller's is remembered for
      // the caller to wait for (one stream throughout, the common case, takes no lock here).
      std::optional<cuda::StreamHandleGuard> on_stream;
      if (const int d = node->device.index(); node->stream) {
        if (node->stream != cuda::current_stream_handle(d)) {
          std::lock_guard lk(task->mutex);
          task->streams.emplace(d, node->stream);
        }
        on_stream.emplace(d, node->stream);
      }
      std::optional<IntraOpThreadsGuard> share;
      if (task->intra_op_share > 0) share.emplace(task->intra_op_share);
      NoGradGuard no_grad;
      run_node(task, node, grad.take());
    } catch (...) {
      task->fail(detail::with_context(std::current_exception(),
                                      str("backward of '", node->name, "' on ", node->device)));
    }
  }
  // Let go of the task before counting this node done: once the count reaches 0 the caller
  // returns, and its reference must be the last, so that the task (its error, which the caller is
  // reading) is destroyed on the caller's thread, not under it.
  const std::shared_ptr<WorkQueue> owner = task->owner_queue;
  GraphTask* const counted = task.get();
  task.reset();
  if (counted->outstanding.fetch_sub(1) == 1) owner->wake();
}

}  // namespace

void set_backward_device_threads(bool enabled) { g_device_threads = enabled; }
bool backward_device_threads() { return g_device_threads; }

namespace {

// One backward pass from `root`; with `inputs` (autograd::grad), returns their gradients; with
// `defer`, hands what it put off to `deferred`.
std::vector<Tensor> execute(const Tensor& root, const Tensor& grad_in, bool retain_graph,
                            const std::vector<Tensor>* inputs, bool defer = false,
                            autograd::DeferredWeightGrads* deferred = nullptr) {
  TD_CHECK_AS(AutogradError, root.requires_grad(),
              "backward: the tensor does not require grad and has no grad_fn\n  hint: call "
              "requires_grad_() on the parameters before the forward pass, and do not run it "
              "under NoGradGuard");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    TD_CHECK_SHAPE(root.numel() == 1,
                   "backward: a gradient can be created implicitly only for a "
                   "one-element output, but the output has shape ",
                   root.shape(),
                   "\n  hint: reduce it first (loss.sum() or loss.mean()), or pass a gradient");
    grad = ones(root.shape(), root.options());
  }
  TD_CHECK_SHAPE(grad.shape() == root.shape(), "backward: gradient shape ", grad.shape(),
                 " does not match the output shape ", root.shape());
  // Checked here, where the user passed it, rather than as an engine invariant inside the first
  // node's backward (a bfloat16 output under autocast and a float32 gradient, say).
  TD_CHECK_DTYPE(grad.dtype() == root.dtype(), "backward: the gradient ", describe(grad),
                 " must have the output's dtype (", describe(root),
                 ")\n  hint: grad.to(output.dtype())");
  const std::shared_ptr<Node> start = gradient_node(root);
  const std::shared_ptr<WorkQueue> queue = local_queue();
  auto task =
      std::make_shared<GraphTask>(retain_graph, defer, queue, ::tandem::detail::current_task());
  task->count_dependencies(start.get(), thread_of);
  for (const Device& d : task->threads)
    task->queues[d] = d == Device::cpu(0) ? queue : backward_workers().queue({d});
  std::vector<std::shared_ptr<Node>> targets;  // alive until the pass ends (a leaf's accumulator)
  if (inputs) {
    task->captured.resize(inputs->size());
    for (size_t k = 0; k < inputs->size(); ++k) {
      const Tensor& t = (*inputs)[k];
      TD_CHECK_AS(AutogradError, t.defined() && t.requires_grad(), "autograd::grad: input ", k,
                  " does not require grad, so it has no gradient");
      targets.push_back(gradient_node(t));
      task->capture[targets.back().get()].push_back(k);
    }
    task->mark_needed(start.get());
    if (!task->needed.contains(start.get())) return task->captured;  // none is reachable
  }
  // CPU nodes of several devices run at once on their threads: each takes its share of the
  // caller's intra-op threads instead of all of them (core/thread_pool.h says why).
  if (task->cpu_threads > 1)
    task->intra_op_share = std::max(1, intra_op_threads() / task->cpu_threads);
  InputBuffer first;
  first.add(UINT64_MAX, 0, grad, false);
  if (grad.device().is_cuda())  // made on the caller's stream; the root runs on its forward's
    cuda::stream_wait(grad.device().index(), start->stream,
                      cuda::current_stream_handle(grad.device().index()));
  push_ready(task, start.get(), std::move(first));
  // Run this thread's share (its cpu nodes, or its device's on a worker) until every node is done.
  while (task->outstanding.load() > 0) {
    WorkQueue::Job job = queue->pop();
    if (job) job();
  }
  // The caller's streams wait for backward's others: .grad is ready for what it queues next.
  for (const auto& [device, stream] : task->streams)
    cuda::stream_wait(device, cuda::current_stream_handle(device), stream);
  if (task->error) std::rethrow_exception(task->error);
  if (deferred && task->deferred.size() > 0) {
    task->deferred.sort_by_run_order();
    // Every gradient is in only once the deferred parts have run: the callbacks wait for that.
    if (!task->parent) {
      for (auto& fn : task->callbacks) task->deferred.add_callback(std::move(fn));
      task->callbacks.clear();
    }
    *deferred = std::move(task->deferred);
  }
  if (!task->parent) ::tandem::detail::run_callbacks(task);
  return std::move(task->captured);
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  execute(root, grad, retain_graph, nullptr);
}

autograd::DeferredWeightGrads autograd::backward(const Tensor& output,
                                                 const BackwardOptions& options) {
  DeferredWeightGrads deferred;
  execute(output, options.grad_output, options.retain_graph, nullptr, options.defer_weight_grads,
          &deferred);
  return deferred;
}

void autograd::detail::run_as_backward_tail(const std::function<void()>& fn,
                                            std::vector<std::function<void()>>& callbacks) {
  auto task =
      std::make_shared<GraphTask>(false, false, local_queue(), ::tandem::detail::current_task());
  {
    ::tandem::detail::CurrentTask current(task);  // so that fn's hooks may queue_callback
    try {
      fn();
    } catch (...) {
      std::lock_guard lk(task->mutex);
      for (auto& queued : task->callbacks) callbacks.push_back(std::move(queued));
      throw;
    }
  }
  std::vector<std::function<void()>> all = std::exchange(callbacks, {});
  for (auto& queued : task->callbacks) all.push_back(std::move(queued));
  if (task->parent) {  // inside another backward: its outermost task runs them at its end
    GraphTask* outermost = task->outermost();
    std::lock_guard lk(outermost->mutex);
    for (auto& f : all) outermost->callbacks.push_back(std::move(f));
    return;
  }
  task->callbacks = std::move(all);
  ::tandem::detail::run_callbacks(task);
}

std::vector<Tensor> autograd::grad(const Tensor& output, const std::vector<Tensor>& inputs,
                                   const GradOptions& options) {
  std::vector<Tensor> grads = execute(output, options.grad_output, options.retain_graph, &inputs);
  for (size_t k = 0; k < grads.size(); ++k)
    TD_CHECK_AS(AutogradError, grads[k].defined() || options.allow_unused, "autograd::grad: input ",
                k, " (", describe(inputs[k]), ") is not used to compute the output",
                "\n  hint: pass allow_unused = true to get an undefined tensor for it");
  return grads;
}

}  // namespace tandem
