// nn/container.h — Sequential and ModuleList. They hold modules of any type (nn::AnyModule), each
// under a name: "0", "1", … as PyTorch names them, or one given, as in PyTorch's
// Sequential(OrderedDict(...)), so that a model's parameters have names that say what they are
// ("conv1.weight", "block1.bn1.running_mean") and keep them in every mode. They copy like any
// module: copying a container copies each module (tensor handles shared); nn::clone deep-copies.
//
//   nn::Sequential mlp(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));   // "0", "1", "2"
//   nn::Sequential cnn{{"conv1", nn::Conv2d(1, 32, 3)},
//                      {"pool1", nn::ReLUMaxPool2d(2)},
//                      {"flatten", nn::Flatten()},
//                      {"fc", nn::Linear(5408, 10)}};                      // "conv1.weight", ...
#pragma once

#include <tandem/nn/any_module.h>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::nn {

/// A module and the name it has in its container.
struct NamedModule {
  std::string name;
  AnyModule module;
};

class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <typename... M>
  requires(std::derived_from<M, Module>&&...) explicit ModuleList(M... modules) {
    (push_back(std::move(modules)), ...);
  }
  /// Named modules, in order; ValueError for a name that is empty, has an empty dotted part, or
  /// is taken. A dotted name ("transformer.h.0") puts the module's tensors under that path.
  ModuleList(std::initializer_list<NamedModule> modules);

  /// Appends a module named by its position ("3").
  void push_back(AnyModule module);
  /// Appends a module under `name`.
  void push_back(std::string name, AnyModule module);

  size_t size() const { return items_.size(); }
  Module& operator[](size_t i);
  /// The module called `name`; IndexError naming the names there are otherwise.
  Module& operator[](std::string_view name);
  /// The i-th module, or the one called `name`, as its concrete type (ValueError when it is
  /// another type).
  template <typename M>
  M& at(size_t i) {
    (void)(*this)[i];  // the range check
    return items_[i].module.get<M>();
  }
  template <typename M>
  M& at(std::string_view name) {
    (void)(*this)[name];
    return items_[index_of(name)].module.get<M>();
  }
  const std::vector<NamedModule>& items() const { return items_; }
  void visit(Visitor& v) override;

 protected:
  size_t index_of(std::string_view name) const;
  std::vector<NamedModule> items_;
};

/// Applies its modules in order. Every module needs forward(const Tensor&).
class Sequential : public ModuleList {
 public:
  using ModuleList::ModuleList;

  Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// Modules [begin, end), under their names, as a Sequential holding the same module objects
  /// (AnyModule::shared): training the slice trains these. For checkpoint_sequential and
  /// parallel::split. (Copying the slice, as any container, copies the modules.)
  Sequential slice(size_t begin, size_t end) const;
};

}  // namespace tandem::nn
