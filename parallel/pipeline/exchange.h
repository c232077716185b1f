// parallel/pipeline/exchange.h — the messages between a pipeline's stages: the activation stage
// k sends forward to stage k+1 for micro-batch i, and the gradient stage k+1 sends back to stage
// k. A receiver waits for exactly the message it needs (stage, direction, micro-batch), so the
// order in which neighbours happen to post does not matter. abort() wakes every waiting stage
// with Exchange::Aborted: a failed stage never leaves the others blocked.
#pragma once

#include <tandem/core/tensor.h>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>

namespace tandem::parallel {

class Exchange {
 public:
  enum Direction { Activation, Gradient };
  /// Thrown by take() once the pipeline is aborted; the pipeline reports the stage that failed.
  struct Aborted {};

  /// Posts `t` for stage `to`'s micro-batch `micro_batch`.
  void put(Direction direction, int64_t to, int64_t micro_batch, Tensor t) {
    {
      std::lock_guard lk(mutex_);
      messages_[{direction, to, micro_batch}] = std::move(t);
    }
    posted_.notify_all();
  }

  /// Waits for, removes and returns stage `stage`'s message for `micro_batch`.
  Tensor take(Direction direction, int64_t stage, int64_t micro_batch) {
    std::unique_lock lk(mutex_);
    const Key key{direction, stage, micro_batch};
    posted_.wait(lk, [&] { return aborted_ || messages_.count(key) != 0; });
    if (aborted_) throw Aborted{};
    Tensor t = std::move(messages_[key]);
    messages_.erase(key);
    return t;
  }

  void abort() {
    {
      std::lock_guard lk(mutex_);
      aborted_ = true;
    }
    posted_.notify_all();
  }
  bool aborted() {
    std::lock_guard lk(mutex_);
    return aborted_;
  }

 private:
  using Key = std::tuple<int, int64_t, int64_t>;
  std::mutex mutex_;
  std::condition_variable posted_;
  std::map<Key, Tensor> messages_;
  bool aborted_ = false;
};

}  // namespace tandem::parallel
