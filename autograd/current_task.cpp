// autograd/current_task.cpp — the thread's current backward task and the callbacks queued to it.
#include <tandem/autograd/current_task.h>
#include <tandem/autograd/engine.h>
#include <tandem/core/check.h>
#include <functional>
#include <mutex>
#include <utility>

namespace tandem {
namespace {

thread_local std::shared_ptr<GraphTask> t_task;

}  // namespace

namespace detail {

const std::shared_ptr<GraphTask>& current_task() { return t_task; }

CurrentTask::CurrentTask(std::shared_ptr<GraphTask> task)
    : outer_(std::exchange(t_task, std::move(task))) {}

CurrentTask::~CurrentTask() { t_task = std::move(outer_); }

void run_callbacks(const std::shared_ptr<GraphTask>& task) {
  CurrentTask current(task);  // a callback may queue more (run in order)
  for (size_t i = 0;; ++i) {
    std::function<void()> fn;
    {
      std::lock_guard lk(task->mutex);
      if (i >= task->callbacks.size()) break;
      fn = std::move(task->callbacks[i]);
    }
    fn();  // an exception ends backward with it
  }
}

}  // namespace detail

bool in_backward_pass() { return t_task != nullptr; }

void queue_callback(std::function<void()> fn) {
  TD_CHECK_AS(AutogradError, t_task != nullptr,
              "queue_callback: no backward pass is running on this thread (call it from a hook)");
  GraphTask* outermost = t_task->outermost();
  std::lock_guard lk(outermost->mutex);
  outermost->callbacks.push_back(std::move(fn));
}

}  // namespace tandem
