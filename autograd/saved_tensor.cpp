// autograd/saved_tensor.cpp — saving a tensor for backward: version check and pack/unpack hooks.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/saved_tensor.h>
#include <tandem/core/tensor_checks.h>

namespace tandem {
namespace {
thread_local std::shared_ptr<const SavedTensorHooksPair> t_hooks;
}

SavedTensorHooks::SavedTensorHooks(std::function<std::any(const Tensor&)> pack,
                                   std::function<Tensor(const std::any&)> unpack)
    : previous_(t_hooks) {
  TD_CHECK_VALUE(pack && unpack, "SavedTensorHooks: both a pack and an unpack hook are needed");
  t_hooks = std::make_shared<const SavedTensorHooksPair>(
      SavedTensorHooksPair{std::move(pack), std::move(unpack)});
}

SavedTensorHooks::~SavedTensorHooks() { t_hooks = std::move(previous_); }

std::shared_ptr<const SavedTensorHooksPair> SavedTensorHooks::current() { return t_hooks; }
void SavedTensorHooks::set_current(std::shared_ptr<const SavedTensorHooksPair> hooks) {
  t_hooks = std::move(hooks);
}

SavedTensor::SavedTensor(const char* name, const Tensor& t, bool is_output) : name_(name) {
  if (!t.defined()) return;
  defined_ = true;
  storage_ = t.impl().storage;
  version_ = t.version();
  hooks_ = t_hooks;
  if (!hooks_) {
    data_ = is_output ? t.detach() : t;
    return;
  }
  shape_ = t.shape();
  dtype_ = t.dtype();
  device_ = t.device();
  // The hook runs as user code outside backward's bookkeeping: whatever it computes (a copy to
  // another device) is not part of the graph.
  NoGradGuard no_grad;
  packed_ = hooks_->pack(t.detach());
}

std::string SavedTensor::saved_as() const {
  return data_.defined() ? describe(data_) : str(shape_, " ", dtype_, " on ", device_);
}

Tensor SavedTensor::unpack(const char* op) const {
  if (!defined_) return Tensor();
  const auto storage = storage_.lock();
  TD_CHECK_AS(AutogradError, !storage || storage->version() == version_, "backward of '", op,
              "': the tensor it saved as '", name_, "' (", saved_as(),
              ") was modified by an in-place op (version ", version_, " when saved, ",
              storage ? storage->version() : 0,
              " now), so its gradient would be wrong\n  hint: use an out-of-place op, or clone() "
              "the tensor before modifying it");
  if (!hooks_) return data_;
  Tensor t;
  {
    NoGradGuard no_grad;
    t = hooks_->unpack(packed_);
  }
  TD_CHECK_AS(AutogradError,
              t.defined() && t.shape() == shape_ && t.dtype() == dtype_ && t.device() == device_,
              "backward of '", op, "': the unpack hook gave back ",
              t.defined() ? describe(t) : std::string("an undefined tensor"), " for '", name_,
              "', which was saved as ", saved_as(),
              "\n  hint: unpack must return the tensor as it was packed (move it back to its "
              "device)");
  return t;
}

}  // namespace tandem
