// nn/container.h — Sequential and ModuleList. They hold modules of any type by value (type-erased
// behind shared_ptr), name them "0", "1", … as PyTorch does, and copy like any module: copying a
// container copies each module (tensor handles shared); nn::clone deep-copies.
#pragma once

#include <tandem/nn/module.h>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

namespace tandem::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <typename... M>
  explicit ModuleList(M... modules) {
    (push_back(std::move(modules)), ...);
  }
  ModuleList(const ModuleList& other);
  ModuleList& operator=(const ModuleList& other);
  // Moving hands over the same module objects (a copy copies each module, sharing its tensors).
  ModuleList(ModuleList&& other) = default;
  ModuleList& operator=(ModuleList&& other) = default;

  template <typename M>
  void push_back(M module) {
    static_assert(std::is_base_of_v<Module, M>, "ModuleList holds nn::Module types");
    add(std::make_shared<M>(std::move(module)), [](const Module& m) -> std::shared_ptr<Module> {
      return std::make_shared<M>(static_cast<const M&>(m));
    });
    on_push(static_cast<M*>(items_.back().module.get()));
  }
  size_t size() const { return items_.size(); }
  Module& operator[](size_t i);
  /// The i-th module as its concrete type (a ValueError when the type differs).
  template <typename M>
  M& at(size_t i) {
    M* m = dynamic_cast<M*>(&(*this)[i]);
    TD_CHECK_VALUE(m != nullptr, "ModuleList::at: item ", i, " is a ", (*this)[i].type_name(),
                   ", not the requested type");
    return *m;
  }
  void visit(Visitor& v) override;

 protected:
  using Copier = std::function<std::shared_ptr<Module>(const Module&)>;
  struct Item {
    std::shared_ptr<Module> module;
    Copier copy;
  };
  void add(std::shared_ptr<Module> module, Copier copy);
  // Sequential records how to call forward for each type it is given.
  virtual void on_push_erased(Module*, const std::function<Tensor(Module&, const Tensor&)>&) {}
  template <typename M>
  void on_push(M*) {
    if constexpr (requires(M & m, const Tensor& x) { m.forward(x); })
      on_push_erased(nullptr, [](Module& m, const Tensor& x) -> Tensor {
        return static_cast<M&>(m).forward(x);
      });
  }
  std::vector<Item> items_;
};

/// Applies its modules in order: Sequential(Linear(784, 512), ReLU(), Linear(512, 10)).
class Sequential : public ModuleList {
 public:
  Sequential() = default;
  template <typename... M>
  explicit Sequential(M... modules) {
    (push_back(std::move(modules)), ...);
  }
  Sequential(const Sequential& other) = default;
  Sequential& operator=(const Sequential& other) = default;
  Sequential(Sequential&& other) = default;
  Sequential& operator=(Sequential&& other) = default;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// Modules [begin, end) as a Sequential holding the same module objects (and copying it, as any
  /// container, copies the modules but shares their tensors): training the slice trains these.
  /// For checkpoint_sequential and parallel::split.
  Sequential slice(size_t begin, size_t end) const;

 protected:
  void on_push_erased(Module*, const std::function<Tensor(Module&, const Tensor&)>& f) override {
    forwards_.push_back(f);
  }

 private:
  std::vector<std::function<Tensor(Module&, const Tensor&)>> forwards_;
};

}  // namespace tandem::nn
