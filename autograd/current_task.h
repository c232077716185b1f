// autograd/current_task.h — which backward pass a thread is working for. A thread runs a node (or
// a callback) on behalf of one GraphTask at a time; hooks that run inside it ask for that task
// (queue_callback hands a function to its outermost task, which runs it once the whole pass is
// done, as PyTorch's Variable._execution_engine.queue_callback). Private to the engine's files.
#pragma once

#include <tandem/autograd/graph_task.h>
#include <memory>

namespace tandem::detail {

/// The task whose node (or whose callbacks) this thread is running; null outside backward.
const std::shared_ptr<GraphTask>& current_task();

/// Makes `task` the thread's task for the scope, and the one before it again afterwards (a
/// backward called inside a hook nests).
class CurrentTask {
 public:
  explicit CurrentTask(std::shared_ptr<GraphTask> task);
  ~CurrentTask();
  CurrentTask(const CurrentTask&) = delete;
  CurrentTask& operator=(const CurrentTask&) = delete;

 private:
  std::shared_ptr<GraphTask> outer_;
};

/// Runs `task`'s queued callbacks in order, as its current task: one a callback queues runs
/// after the others. An exception ends the pass with it.
void run_callbacks(const std::shared_ptr<GraphTask>& task);

}  // namespace tandem::detail
