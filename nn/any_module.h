// nn/any_module.h — a module of any type behind one handle (LibTorch's AnyModule). What holds
// modules without knowing their types uses it: Sequential and ModuleList for their children,
// DataParallel for the module it replicates, Checkpointed for the block it recomputes.
//
//   nn::AnyModule a = nn::Linear(4, 3);      // owns a Linear
//   Tensor y = a.forward(x);                  // Linear::forward, found when `a` was made
//   nn::AnyModule b = a;                      // a copy: another Linear, the same tensors
//   nn::AnyModule c = a.shared();             // another handle to the same Linear
//   auto net = std::make_shared<Net>();
//   nn::AnyModule d(net);                     // refers to *net: train(), to() on either are seen
//
// An AnyModule is a module value, as every module is: copying it copies the module (tensor
// handles shared, as copying the module's own type does; nn::clone deep-copies), which is what
// DataParallel's replicas need. shared() is the exception, for a view of the same object
// (Sequential::slice, parallel::split's stages).
#pragma once

#include <tandem/core/check.h>
#include <tandem/nn/module.h>
#include <concepts>
#include <memory>
#include <typeinfo>
#include <utility>

namespace tandem::nn {

class AnyModule {
 public:
  AnyModule() = default;

  /// Owns `module` (moved in).
  template <typename M>
  requires std::derived_from<M, Module> AnyModule(M module)
      : AnyModule(std::make_shared<M>(std::move(module))) {}

  /// Refers to `*module`, which it keeps alive. The pointer's type must be the module's own
  /// (ValueError otherwise): a copy made as a base class would lose the rest.
  template <typename M>
  requires std::derived_from<M, Module> AnyModule(std::shared_ptr<M> module)
      : module_(std::move(module)), copy_([](const Module& m) -> std::shared_ptr<Module> {
          return std::make_shared<M>(static_cast<const M&>(m));
        }) {
    TD_CHECK_VALUE(module_ != nullptr, "AnyModule: the module is null");
    TD_CHECK_VALUE(typeid(*module_) == typeid(M), "AnyModule: a ", module_->type_name(),
                   " held through a pointer to a base class; give it as its own type (copies "
                   "are made as the pointer's type)");
    if constexpr (requires(M & m, const Tensor& x) {
                    { m.forward(x) } -> std::convertible_to<Tensor>;
                  })
      forward_ = [](Module& m, const Tensor& x) -> Tensor { return static_cast<M&>(m).forward(x); };
  }

  AnyModule(const AnyModule& other)
      : module_(other.module_ ? other.copy_(*other.module_) : nullptr),
        copy_(other.copy_),
        forward_(other.forward_) {}
  AnyModule& operator=(const AnyModule& other) {
    if (this != &other) *this = AnyModule(other);
    return *this;
  }
  AnyModule(AnyModule&&) = default;
  AnyModule& operator=(AnyModule&&) = default;

  /// Another handle to the same module object.
  AnyModule shared() const {
    AnyModule a;
    a.module_ = module_;
    a.copy_ = copy_;
    a.forward_ = forward_;
    return a;
  }

  bool defined() const { return module_ != nullptr; }
  Module& get() const {
    TD_CHECK_VALUE(module_ != nullptr, "AnyModule: empty (no module was given)");
    return *module_;
  }
  Module* operator->() const { return &get(); }
  /// The module as its concrete type; ValueError naming both types when it is another.
  template <typename M>
  M& get() const {
    M* m = dynamic_cast<M*>(&get());
    TD_CHECK_VALUE(m != nullptr, "AnyModule: the module is a ", get().type_name(),
                   ", not the type asked for");
    return *m;
  }
  /// The object itself, shared (for a forward that must outlive this handle: a recompute).
  std::shared_ptr<Module> ptr() const { return module_; }

  /// Whether the module has forward(const Tensor&).
  bool has_forward() const { return forward_ != nullptr; }
  /// module.forward(x); ValueError naming the type when it has no forward(const Tensor&).
  Tensor forward(const Tensor& x) const {
    TD_CHECK_VALUE(forward_ != nullptr, get().type_name(),
                   " has no forward(const Tensor&), so it cannot be called with one tensor");
    return forward_(get(), x);
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }

 private:
  std::shared_ptr<Module> module_;
  std::shared_ptr<Module> (*copy_)(const Module&) = nullptr;
  Tensor (*forward_)(Module&, const Tensor&) = nullptr;
};

}  // namespace tandem::nn
