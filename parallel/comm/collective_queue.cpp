// parallel/comm/collective_queue.cpp — the collectives' thread, and what a failure says.
#include <tandem/autograd/grad_mode.h>
#include <tandem/core/check.h>
#include <tandem/core/trace.h>
#include <tandem/parallel/comm/blocked_time.h>
#include <tandem/parallel/comm/collective_queue.h>
#include <tandem/parallel/comm/gloo_rendezvous.h>
#include <tandem/parallel/failure_record.h>
#include <chrono>

namespace tandem::parallel {

CollectiveQueue::CollectiveQueue(std::string backend, int rank,
                                 std::function<std::vector<int64_t>()> departed_ranks,
                                 bool inline_when_idle, std::function<bool()> progress)
    : backend_(std::move(backend)),
      rank_(rank),
      departed_ranks_(std::move(departed_ranks)),
      inline_when_idle_(inline_when_idle),
      progress_(std::move(progress)) {
  BlockSigpipe quiet;  // the thread keeps the mask: a write to a dead peer is an error, not death
  thread_ = std::thread([this] {
    if (trace::enabled()) trace::set_thread_name(backend_ + " collectives");
    loop();
  });
  if (!departed_ranks_) return;
  try {
    watchdog_ = std::thread([this] { watch(); });
  } catch (...) {  // a joinable thread_ must not be destroyed
    {
      std::lock_guard lk(mutex_);
      stop_ = true;
    }
    ready_.notify_all();
    thread_.join();
    throw;
  }
}

CollectiveQueue::~CollectiveQueue() {
  {
    std::lock_guard lk(mutex_);
    stop_ = true;
  }
  ready_.notify_all();
  thread_.join();
  // The watchdog outlives the worker: the queued collectives that finish first may still hang.
  {
    std::lock_guard lk(mutex_);
    watch_stop_ = true;
  }
  watch_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void CollectiveQueue::started(const WorkPtr& work) {
  if (!departed_ranks_) return;  // no watchdog: skip the clock
  running_ = work;
  running_since_ = Clock::now();
}

bool CollectiveQueue::broken() {
  std::lock_guard lk(mutex_);
  return broken_ != nullptr;
}

void CollectiveQueue::push(WorkPtr work, std::function<void(uint32_t)> run, uint32_t tag,
                           bool may_inline) {
  // For the worker thread: it must not touch the caller's CUDA tensors before the caller's
  // streams have produced them (StreamFence says why). Empty when they are the default streams.
  Task task{std::move(work), std::move(run), tag, cuda::StreamFence::record()};
  std::unique_lock lk(mutex_);
  if (broken_) {  // fail at once: the worker may still be inside the call that broke the group
    const std::exception_ptr error = broken_;
    lk.unlock();
    task.work->mark_done(error);
    return;
  }
  if (may_inline && inline_when_idle_ && queue_.empty() && !busy_) {
    busy_ = true;
    started(task.work);
    lk.unlock();
    const auto from = std::chrono::steady_clock::now();
    execute(task);
    detail::note_blocked(from, std::chrono::steady_clock::now());  // the caller's time too
    const bool more = progress_ && !broken() && progress_();
    lk.lock();
    busy_ = false;
    running_.reset();
    pending_ = pending_ || more;
    // Wake the worker only when it has something to do: a task queued meanwhile, progress due,
    // or the stop. An unconditional notify woke it (a futex call and a context switch) after
    // every inline collective, tens of thousands a second, on the cores the ranks spin on.
    const bool wake = !queue_.empty() || pending_ || stop_;
    lk.unlock();
    if (wake) ready_.notify_all();
    return;
  }
  queue_.push_back(std::move(task));
  lk.unlock();
  ready_.notify_all();
}

void CollectiveQueue::loop() {
  for (;;) {
    Task task;
    bool have_task = false;
    {
      std::unique_lock lk(mutex_);
      auto ready = [&] { return !busy_ && (stop_ || !queue_.empty()); };
      if (pending_) {
        ready_.wait_for(lk, std::chrono::microseconds(100), ready);
      } else {
        ready_.wait(lk, ready);
      }
      if (busy_) continue;  // a task runs inline: wait for it
      if (queue_.empty() && stop_ && !pending_) return;
      if (!queue_.empty()) {
        task = std::move(queue_.front());
        queue_.pop_front();
        have_task = true;
        started(task.work);
      }
      busy_ = true;
    }
    if (have_task) execute(task);
    const bool more = progress_ && !broken() && progress_();
    {
      std::lock_guard lk(mutex_);
      busy_ = false;
      pending_ = more;
      running_.reset();
    }
  }
}

void CollectiveQueue::execute(Task& task) {
  std::exception_ptr broken_before;
  {
    std::lock_guard lk(mutex_);
    broken_before = broken_;
  }
  if (broken_before) {
    task.work->mark_done(broken_before);
    return;
  }
  const auto start = Clock::now();
  try {
    NoGradGuard no_grad;  // staging copies are not part of any graph
    const int64_t t0 = trace::enabled() ? trace::now_us() : -1;
    task.fence.wait();
    task.run(task.tag);
    if (t0 >= 0) trace::record(task.work->description(), "comm", t0, trace::now_us());
    task.work->mark_done();
  } catch (const std::exception& e) {
    std::exception_ptr err =
        failure(task, e, std::chrono::duration<double>(Clock::now() - start).count());
    {
      std::lock_guard lk(mutex_);
      if (!broken_) broken_ = err;  // else the watchdog's came first, and the Work has it
    }
    task.work->mark_done(err);  // no effect after the watchdog's
  }
}

// A rank counts as gone when two looks in a row, 250 ms apart, name it: one look can be wrong
// (TCPStore::departed_ranks names rank 0 when the store does not answer within 2 s). A look that
// throws is no look.
void CollectiveQueue::watch() {
  using namespace std::chrono_literals;
  std::string seen_before;  // the ranks the previous look named, for the same collective
  WorkPtr looked_at;
  std::unique_lock lk(mutex_);
  while (!watch_stop_) {
    watch_wake_.wait_for(lk, 250ms, [&] { return watch_stop_; });
    if (watch_stop_ || !running_ || broken_ || Clock::now() - running_since_ < 1s) continue;
    const WorkPtr work = running_;
    const Clock::time_point since = running_since_;
    if (work != looked_at) seen_before.clear(), looked_at = work;
    lk.unlock();
    std::string gone;
    try {
      gone = departed_peers();  // a store request: not under the lock
    } catch (const std::exception&) {
    }
    const bool confirmed = !gone.empty() && gone == seen_before;
    seen_before = gone;
    std::exception_ptr err;
    if (confirmed) {
      try {
        const double seconds = std::chrono::duration<double>(Clock::now() - since).count();
        err = error(*work, "a peer left while it was in flight (seen by the store's watchdog)",
                    seconds, gone);
      } catch (...) {
        err = std::current_exception();
      }
    }
    lk.lock();
    if (!err || running_ != work || work->is_completed() || broken_) continue;
    broken_ = err;
    std::vector<WorkPtr> queued;  // they would wait behind the call that does not return
    for (const Task& t : queue_) queued.push_back(t.work);
    lk.unlock();
    work->mark_done(err);  // the transport's own call returns at its timeout
    for (const WorkPtr& w : queued) w->mark_done(err);
    try {
      detail::record_peer_failure(std::stoi(gone));  // the first of them
    } catch (const std::exception&) {
    }
    lk.lock();
  }
}

std::string CollectiveQueue::departed_peers() const {
  std::string who;
  for (int64_t r : departed_ranks_())
    if (r != rank_) who += (who.empty() ? "" : ", ") + std::to_string(r);
  return who;
}

std::exception_ptr CollectiveQueue::error(const Work& work, const std::string& what, double seconds,
                                          const std::string& departed) const {
  return std::make_exception_ptr(DistributedError(str(
      backend_, " ", work.description(), " failed after ", seconds, " s: ", what,
      departed.empty()
          ? ""
          : "\n  rank " + departed + (departed.find(',') == std::string::npos ? " has" : " have") +
                " exited or crashed (its store connection closed)",
      "\n  hint: the group cannot be used after a failed collective; restart the job")));
}

std::exception_ptr CollectiveQueue::failure(const Task& task, const std::exception& e,
                                            double seconds) const {
  std::string who;
  if (departed_ranks_) {
    // A dead peer's sockets close at once, but the store may see its connection close a moment
    // after Gloo does: ask for up to a second.
    for (int tries = 0; tries < 20 && who.empty(); ++tries) {
      who = departed_peers();
      if (who.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!who.empty()) detail::record_peer_failure(std::stoi(who));  // the first of them
  }
  return error(*task.work, e.what(), seconds, who);
}

}  // namespace tandem::parallel
