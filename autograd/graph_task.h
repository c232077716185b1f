// autograd/graph_task.h — the state of one backward call (PyTorch's GraphTask). Every call to
// backward owns one: how many gradients each node still waits for, the gradients that have arrived,
// the error that stopped it, and the callbacks to run when it is done. Nodes of the task run on
// their devices' threads (device_workers.h); the calling thread waits until `outstanding` reaches
// 0. A backward started inside backward (from a hook, or a recompute) is a task of its own whose
// `parent` is the task that thread was running; queue_callback always goes to the outermost one.
#pragma once

#include <tandem/autograd/deferred_weight_grads.h>
#include <tandem/autograd/node.h>
#include <tandem/autograd/thread_local_state.h>
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tandem {

class WorkQueue;

/// The gradients flowing into one node. With one thread they are summed as they arrive, which is
/// in decreasing order of their producers' sequence numbers (each thread's queue runs the latest
/// node first, and a producer is always later than what it feeds). With several threads the
/// arrival order depends on timing, so the parts are kept and summed in that same order when the
/// node is complete: two runs, or one device and four, give the same bits.
class InputBuffer {
 public:
  /// A gradient from input `edge` of the node with sequence number `producer`.
  void add(uint64_t producer, size_t edge, Tensor grad, bool keep_parts);
  /// The sum of everything added.
  Tensor take();

 private:
  Tensor sum_;
  struct Part {
    uint64_t producer;
    size_t edge;
    Tensor grad;
  };
  std::vector<Part> parts_;
};

struct GraphTask {
  GraphTask(bool retain_graph, bool defer_weight_grads, std::shared_ptr<WorkQueue> owner_queue,
            std::shared_ptr<GraphTask> parent)
      : retain_graph(retain_graph),
        defer_weight_grads(defer_weight_grads),
        state(ThreadLocalState::capture()),
        owner_queue(std::move(owner_queue)),
        parent(std::move(parent)) {}

  const bool retain_graph;
  const bool defer_weight_grads;  // ops' weight-gradient parts go to `deferred`
  const ThreadLocalState state;   // the caller's, applied around every node on every thread
  // The queue of the thread that called backward: it runs the cpu:0 nodes, and it is woken there
  // when the last node finishes.
  const std::shared_ptr<WorkQueue> owner_queue;
  const std::shared_ptr<GraphTask> parent;  // the task whose node started this one, if any
  bool keep_parts = false;  // nodes run on several threads: sum gradients in a fixed order
  int cpu_threads = 1;      // the threads that run this task's CPU nodes (caller, cpu:N workers)
  int intra_op_share = 0;   // with several: each one's cap on intra-op threads (0: none)
  std::unordered_set<Node*> hands_off;      // nodes whose gradients go to another thread: run first
  std::unordered_set<Node*> shared_leaves;  // defer_weight_grads: accumulators of 2+ gradients
  std::vector<Device> threads;              // the threads its nodes run on (cpu:0: the caller)
  std::unordered_map<Device, std::shared_ptr<WorkQueue>> queues;  // each thread's queue

  // autograd::grad: the nodes whose incoming gradient is the answer (the inputs' accumulators or
  // grad_fns, each with its indices in `captured`) and the nodes that lead to one of them; only
  // those run, and no .grad is written. Both empty for an ordinary backward.
  std::unordered_map<Node*, std::vector<size_t>> capture;
  std::unordered_set<Node*> needed;

  std::mutex mutex;                             // guards the members below
  std::unordered_map<Node*, int> dependencies;  // gradients each node still waits for
  std::unordered_map<Node*, InputBuffer> buffers;
  std::set<std::pair<int, void*>> streams;       // (CUDA device, stream) its nodes ran on
  std::exception_ptr error;                      // the first one; the rest of the task is abandoned
  std::vector<std::function<void()>> callbacks;  // outermost tasks only
  std::vector<Tensor> captured;                  // autograd::grad's results
  autograd::DeferredWeightGrads deferred;        // defer_weight_grads: what was put off

  std::atomic<int> outstanding{0};  // nodes queued or running
  std::atomic<bool> failed{false};

  /// Counts the gradients each node reachable from `root` will receive, whether the nodes run on
  /// more than one thread (thread_of(node) says which), which nodes hand gradients from one thread
  /// to another, and with defer_weight_grads which leaves get more than one gradient.
  void count_dependencies(Node* root, Device (*thread_of)(const Node&));
  /// autograd::grad: marks the nodes that are captured or lead to a captured one.
  void mark_needed(Node* root);

  /// Keeps the first error; later ones (consequences of the first) are dropped.
  void fail(std::exception_ptr e) {
    std::lock_guard lk(mutex);
    if (!error) error = std::move(e);
    failed = true;
  }
  GraphTask* outermost() {
    GraphTask* t = this;
    while (t->parent) t = t->parent.get();
    return t;
  }
};

}  // namespace tandem
