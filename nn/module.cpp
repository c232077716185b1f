// nn/module.cpp — everything Module offers, each a walk over visit().
#include <cxxabi.h>

#include <tandem/autograd/grad_mode.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/nn/any_module.h>
#include <tandem/nn/module.h>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <typeinfo>

namespace tandem::nn {

void Visitor::slot(std::string_view name, AnyModule& child) { (*this)(name, child.get()); }

namespace {

using TensorFn = std::function<void(const std::string&, Tensor&, bool)>;

// Walks the whole tree, giving every tensor its dotted name.
class RecursiveVisitor : public Visitor {
 public:
  RecursiveVisitor(std::string prefix, const TensorFn& fn) : prefix_(std::move(prefix)), fn_(fn) {}
  void operator()(std::string_view name, Tensor& p) override {
    fn_(prefix_ + std::string(name), p, false);
  }
  void buffer(std::string_view name, Tensor& b) override {
    fn_(prefix_ + std::string(name), b, true);
  }
  void operator()(std::string_view name, Module& child) override {
    // A child under the empty name (a wrapper's module: Checkpointed) adds nothing to the names.
    RecursiveVisitor v(name.empty() ? prefix_ : prefix_ + std::string(name) + ".", fn_);
    child.visit(v);
  }

 private:
  std::string prefix_;
  const TensorFn& fn_;
};

// Direct children only.
class ChildVisitor : public Visitor {
 public:
  std::vector<std::pair<std::string, Module*>> children;
  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view name, Module& child) override {
    children.emplace_back(std::string(name), &child);
  }
};

// Replaces tensors by `fn(tensor)`, keeping a leaf parameter one. A tensor met again under
// another name (tied) gets the replacement made the first time, so the tie survives to(),
// to(dtype) and clone.
class Replacer {
 public:
  explicit Replacer(std::function<Tensor(const Tensor&)> fn) : fn_(std::move(fn)) {}
  void operator()(Tensor& t) {
    if (!t.defined()) return;
    auto [it, fresh] = done_.try_emplace(t.impl_ptr().get(), Tensor());
    if (fresh) {
      keep_.push_back(t);  // holds the old tensor, so that its address is not reused meanwhile
      replace(t, fn_);
      it->second = t;
    } else {
      t = it->second;
    }
  }

 private:
  static void replace(Tensor& t, const std::function<Tensor(const Tensor&)>& fn);
  std::function<Tensor(const Tensor&)> fn_;
  std::map<const TensorImpl*, Tensor> done_;
  std::vector<Tensor> keep_;
};

void Replacer::replace(Tensor& t, const std::function<Tensor(const Tensor&)>& fn) {
  const bool requires_grad = t.requires_grad();
  Tensor next;
  {
    NoGradGuard no_grad;  // a move is not part of any graph
    next = fn(t).detach();
  }
  if (requires_grad) next.requires_grad_(true);
  t = next;
}

}  // namespace

void for_each_tensor(Module& m, const TensorFn& fn) {
  RecursiveVisitor v("", fn);
  m.visit(v);
}

// A tensor visited under two names (a tied weight: GPT's token embedding and lm_head) is one
// parameter: listed once, under its first name, as PyTorch's named_parameters() does, so that the
// optimizer, gradient clipping, DDP's buckets and the memory tables count it once.
StateDict Module::named_parameters() {
  StateDict out;
  std::set<const TensorImpl*> seen;
  for_each_tensor(*this, [&](const std::string& n, Tensor& t, bool buffer) {
    if (!buffer && t.defined() && seen.insert(&t.impl()).second) out.emplace_back(n, t);
  });
  return out;
}

std::vector<Tensor> Module::parameters() {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

StateDict Module::named_buffers() {
  StateDict out;
  std::set<const TensorImpl*> seen;
  for_each_tensor(*this, [&](const std::string& n, Tensor& t, bool buffer) {
    if (buffer && t.defined() && seen.insert(&t.impl()).second) out.emplace_back(n, t);
  });
  return out;
}

StateDict Module::state_dict() {
  StateDict out;
  std::set<std::string> seen;
  for_each_tensor(*this, [&](const std::string& n, Tensor& t, bool) {
    if (!t.defined()) return;
    // Two tensors under one name (a module beside a transparent child with the same names) would
    // save one and load it into both.
    TD_CHECK_VALUE(seen.insert(n).second, type_name(), ": two tensors are called \"", n, "\"");
    out.emplace_back(n, t);
  });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() {
  ChildVisitor v;
  visit(v);
  return v.children;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : named_children()) child->train(on);
}

void Module::to(Device device) {
  Replacer move([&](const Tensor& x) { return x.to(device); });
  for_each_tensor(*this, [&](const std::string&, Tensor& t, bool) {
    if (t.defined() && t.device() != device) move(t);
  });
}

void Module::to(DType dtype) {
  TD_CHECK_DTYPE(is_floating(dtype), "Module::to: parameters must stay floating point, not ",
                 dtype);
  Replacer convert([&](const Tensor& x) { return x.to(dtype); });
  for_each_tensor(*this, [&](const std::string&, Tensor& t, bool) {
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != dtype) convert(t);
  });
}

void Module::zero_grad() {
  for (Tensor& p : parameters()) p.set_grad(Tensor());
}

void Module::clone_tensors_() {
  Replacer copy([](const Tensor& x) { return x.clone(); });
  for_each_tensor(*this, [&](const std::string&, Tensor& t, bool) { copy(t); });
}

void Module::load_state_dict(const StateDict& state, bool strict, std::string_view source) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) given[name] = &t;
  std::vector<std::string> missing, mismatched;
  std::set<std::string> used;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  for_each_tensor(*this, [&](const std::string& name, Tensor& t, bool) {
    if (!t.defined()) return;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back("\"" + name + "\"");
      return;
    }
    used.insert(name);
    if (it->second->shape() != t.shape())
      mismatched.push_back(
          tandem::str("\"", name, "\": checkpoint ", it->second->shape(), " vs model ", t.shape()));
    else
      copies.emplace_back(&t, it->second);
  });
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : given)
    if (!used.count(name)) unexpected.push_back("\"" + name + "\"");
  std::ostringstream problems;
  auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (names.empty()) return;
    problems << (problems.tellp() > 0 ? "; " : "") << what << " ";
    for (size_t i = 0; i < names.size(); ++i) problems << (i ? ", " : "") << names[i];
  };
  if (strict) {
    list(missing.size() == 1 ? "missing key" : "missing keys", missing);
    list(unexpected.size() == 1 ? "unexpected key" : "unexpected keys", unexpected);
  }
  list("shape mismatch for", mismatched);
  if (problems.tellp() > 0) {
    detail::fail<ValueError>(
        "load_state_dict: ", problems.str(),
        source.empty() ? std::string() : tandem::str(" (checkpoint ", source, ")"));
  }
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst->copy_(*src);
}

namespace {

void print_tree(Module& m, std::ostream& os, int indent) {
  os << m.type_name() << "(";
  auto children = m.named_children();
  const std::string extra = m.extra_repr();
  if (children.empty()) {
    os << extra << ")";
    return;
  }
  const std::string pad(size_t(indent + 2), ' ');
  if (!extra.empty()) os << "\n" << pad << extra;
  for (auto& [name, child] : children) {
    os << "\n" << pad;
    if (!name.empty()) os << "(" << name << "): ";
    print_tree(*child, os, indent + 2);
  }
  os << "\n" << std::string(size_t(indent), ' ') << ")";
}

}  // namespace

std::string Module::type_name() const {
  // The dynamic type's name without namespaces ("Net", "Linear"), as PyTorch prints the class.
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status), std::free);
  std::string s = status == 0 && name ? name.get() : typeid(*this).name();
  const size_t colon = s.rfind("::");
  return colon == std::string::npos ? s : s.substr(colon + 2);
}

std::string Module::str() {
  std::ostringstream os;
  print_tree(*this, os, 0);
  return os.str();
}

}  // namespace tandem::nn
