// autograd/saved_tensor.h — how a backward function keeps the tensors it needs. An op hands them to
// record() by name; each becomes a SavedTensor, which remembers the version the tensor had and runs
// the pack hook of the innermost SavedTensorHooks guard. When backward reaches the node, the engine
// unpacks them (unpack hook, then the version check) and passes them to the backward function in
// the order they were given. Nothing else may carry a tensor into backward: a tensor captured in
// the lambda would escape the version check and the hooks (activation checkpointing and CPU
// offload are built on them).
#pragma once

#include <tandem/core/tensor.h>
#include <any>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

/// A tensor an op saves for its backward, with the name that errors use ("input", "weight").
struct ToSave {
  const char* name;
  Tensor tensor;
};

/// pack(t) may return anything (a copy on another device, a handle); unpack(packed) must give back
/// a tensor of the same shape, dtype and device. As torch.autograd.graph.saved_tensors_hooks.
struct SavedTensorHooksPair {
  std::function<std::any(const Tensor&)> pack;
  std::function<Tensor(const std::any&)> unpack;
};

/// While alive, every tensor saved for backward on this thread goes through pack (once, at record
/// time) and unpack (once, when backward reaches the op). Guards nest; the innermost one applies.
/// The hooks travel with ThreadLocalState into the threads Tandem starts.
class SavedTensorHooks {
 public:
  SavedTensorHooks(std::function<std::any(const Tensor&)> pack,
                   std::function<Tensor(const std::any&)> unpack);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;

  /// The innermost guard's hooks on this thread, or null.
  static std::shared_ptr<const SavedTensorHooksPair> current();
  static void set_current(std::shared_ptr<const SavedTensorHooksPair> hooks);

 private:
  std::shared_ptr<const SavedTensorHooksPair> previous_;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  /// Saves `t` (undefined is allowed and unpacks to undefined). Runs the current pack hook.
  SavedTensor(const char* name, const Tensor& t);

  /// The tensor for `op`'s backward on `device`. Throws AutogradError naming the op and this
  /// tensor when it was modified in place after it was saved, or when an unpack hook gives back a
  /// tensor of another shape, dtype or device.
  Tensor unpack(const char* op) const;

 private:
  const char* name_ = "";
  Tensor data_;      // without hooks: the tensor itself, detached (no cycle through its grad_fn)
  std::any packed_;  // with hooks: what pack returned
  std::shared_ptr<const SavedTensorHooksPair> hooks_;
  std::weak_ptr<Storage> storage_;  // the original's storage and version, for the check
  uint64_t version_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
  bool defined_ = false;
};

}  // namespace tandem
