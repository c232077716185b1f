// core/hook_handle.h — what registering a hook returns (Tensor::register_hook and friends, defined
// in autograd/). Dropping the handle keeps the hook; remove() takes it out, and does nothing when
// the hook or its tensor is already gone. As PyTorch's RemovableHandle.
#pragma once

#include <functional>
#include <utility>

namespace tandem {

class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(std::function<void()> remove) : remove_(std::move(remove)) {}
  void remove() {
    if (remove_) std::exchange(remove_, nullptr)();
  }

 private:
  std::function<void()> remove_;
};

}  // namespace tandem
