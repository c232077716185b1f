// nn/module.h — the Module base. A model is a plain struct whose visit() names its parameters,
// buffers and children (design 2.3); everything else — parameters(), to(device), train()/eval(),
// state_dict(), printing, clone — is built on that one walk. Modules are values: copying one
// copies tensor handles (shared storage); clone() deep-copies the tensors.
#pragma once

#include <tandem/core/tensor.h>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem::nn {

struct Module;
class AnyModule;

/// What a module's visit() talks to: v("weight", w), v.buffer("running_mean", m), v("fc", fc).
/// A child visited under the empty name is transparent: its tensors' names are the parent's own
/// (a wrapper such as Checkpointed keeps the wrapped module's names so). A child held in an
/// AnyModule is visited as a slot, v.slot("c_attn", c_attn): a visitor may put another module of
/// the same interface there (a plan that swaps layers, as torch's setattr on a submodule); by
/// default a slot is visited as the child it holds.
class Visitor {
 public:
  virtual ~Visitor() = default;
  virtual void operator()(std::string_view name, Tensor& parameter) = 0;
  virtual void buffer(std::string_view name, Tensor& buffer) = 0;
  virtual void operator()(std::string_view name, Module& child) = 0;
  virtual void slot(std::string_view name, AnyModule& child);
};

/// Named tensors in a fixed order (PyTorch's state_dict order: a module's own tensors, then its
/// children's, recursively, with dotted names such as "conv1.weight").
using StateDict = std::vector<std::pair<std::string, Tensor>>;

struct Module {
  Module() = default;
  Module(const Module&) = default;
  Module& operator=(const Module&) = default;
  virtual ~Module() = default;

  /// Names this module's parameters, buffers and children, in registration order.
  virtual void visit(Visitor& v) = 0;
  /// The type name printed for this module: the class name without namespaces ("Net", "Linear").
  virtual std::string type_name() const;
  /// Arguments printed inside the parentheses, as PyTorch's extra_repr.
  virtual std::string extra_repr() const { return ""; }

  std::vector<Tensor> parameters();
  StateDict named_parameters();
  StateDict named_buffers();
  std::vector<std::pair<std::string, Module*>> named_children();
  /// Total number of parameter elements.
  int64_t parameter_count();

  /// Training mode (dropout active, batch norm uses batch statistics), for the whole tree.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer to `device` (parameters stay leaves that require grad).
  /// Call it before creating the optimizer, which holds the moved parameters.
  void to(Device device);
  /// Converts floating parameters and buffers to `dtype` (integer buffers are kept).
  void to(DType dtype);
  /// Clears every parameter's .grad (PyTorch's set_to_none=True).
  void zero_grad();

  /// Parameters and buffers by dotted name (the tensors themselves, not copies).
  StateDict state_dict();
  /// Copies tensors into this module's parameters and buffers. With `strict`, missing and
  /// unexpected keys are errors; shape mismatches always are. The message lists every problem by
  /// name; `source` (a file name) is quoted in it when given.
  void load_state_dict(const StateDict& state, bool strict = true, std::string_view source = "");

  /// Replaces every parameter and buffer with a private copy (see nn::clone).
  void clone_tensors_();
  /// The module tree as PyTorch prints it.
  std::string str();

 protected:
  bool training_ = true;
};

/// A deep copy of a module: same structure, copied tensors, no shared storage. Works for any
/// copyable module type (this is what DataParallel's replicate builds on).
template <typename M>
M clone(const M& module) {
  M copy = module;
  copy.clone_tensors_();
  return copy;
}

/// Visits every parameter and buffer of `m` and its children with full dotted names.
void for_each_tensor(
    Module& m, const std::function<void(const std::string& name, Tensor& t, bool is_buffer)>& fn);

}  // namespace tandem::nn
