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
  /// `is_output`: `t` is the op's own output, kept detached so that it does not hold its own
  /// grad_fn (a cycle: output -> node -> saved output).
  SavedTensor(const char* name, const Tensor& t, bool is_output);

  /// The tensor for `op`'s backward. Throws AutogradError naming the op and this tensor when it
  /// was modified in place after it was saved, or when an unpack hook gives back a tensor of
  /// another shape, dtype or device.
  Tensor unpack(const char* op) const;

 private:
  std::string saved_as() const;  // "[2, 3] float32 on cpu", for messages

  const char* name_ = "";
  bool defined_ = false;
  std::weak_ptr<Storage> storage_;  // the original's storage and version, for the check
  uint64_t version_ = 0;
  Tensor data_;  // without hooks: the tensor itself
  // With hooks: what pack returned, and what the tensor was, to check what unpack gives back.
  std::shared_ptr<const SavedTensorHooksPair> hooks_;
  std::any packed_;
  Shape shape_;
  DType dtype_ = DType::f32;
  Device device_;
};

}  // namespace tandem
