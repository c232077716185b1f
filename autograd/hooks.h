// autograd/hooks.h — a list of hooks that threads may add to, remove from and run at once.
// Adding returns a HookHandle (core/hook_handle.h) whose remove() takes the hook out again.
// Backward runs a snapshot, copied under the lock, so a hook may remove itself or register another
// while it runs.
#pragma once

#include <tandem/core/hook_handle.h>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tandem {

template <typename Fn>
class HookList {
 public:
  HookHandle add(Fn fn) {
    std::lock_guard lk(state_->mu);
    const uint64_t id = state_->next_id++;
    state_->hooks.emplace_back(id, std::move(fn));
    state_->size.store(state_->hooks.size(), std::memory_order_release);
    return HookHandle([weak = std::weak_ptr<State>(state_), id] {
      const auto s = weak.lock();
      if (!s) return;
      std::lock_guard lk(s->mu);
      std::erase_if(s->hooks, [id](const auto& h) { return h.first == id; });
      s->size.store(s->hooks.size(), std::memory_order_release);
    });
  }

  bool empty() const { return state_->size.load(std::memory_order_acquire) == 0; }

  std::vector<Fn> snapshot() const {
    std::vector<Fn> out;
    if (empty()) return out;
    std::lock_guard lk(state_->mu);
    out.reserve(state_->hooks.size());
    for (const auto& h : state_->hooks) out.push_back(h.second);
    return out;
  }

 private:
  struct State {
    std::mutex mu;
    std::vector<std::pair<uint64_t, Fn>> hooks;
    uint64_t next_id = 0;
    std::atomic<size_t> size{0};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace tandem
