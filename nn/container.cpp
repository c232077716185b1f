// nn/container.cpp — ModuleList and Sequential.
#include <tandem/nn/container.h>

namespace tandem::nn {

ModuleList::ModuleList(std::initializer_list<NamedModule> modules) {
  for (const NamedModule& m : modules) push_back(m.name, m.module.shared());
}

void ModuleList::push_back(AnyModule module) {
  push_back(std::to_string(items_.size()), std::move(module));
}

void ModuleList::push_back(std::string name, AnyModule module) {
  TD_CHECK_VALUE(module.defined(), type_name(), ": module \"", name, "\" is empty");
  // A dotted path ("transformer.h.0") is allowed: it lets a flat Sequential, which pipelines split
  // by position, carry a nested model's parameter names (nanoGPT's). An empty part is not.
  const bool path = !name.empty() && name.front() != '.' && name.back() != '.' &&
                    name.find("..") == std::string::npos;
  TD_CHECK_VALUE(path, type_name(), ": \"", name,
                 "\" cannot name a module (names are dotted into parameter names: not empty, no "
                 "empty part between dots)");
  for (const NamedModule& m : items_)
    TD_CHECK_VALUE(m.name != name, type_name(), ": two modules are called \"", name, "\"");
  items_.push_back({std::move(name), std::move(module)});
}

Module& ModuleList::operator[](size_t i) {
  TD_CHECK_INDEX(i < items_.size(), type_name(), ": index ", i, " is out of range for ",
                 items_.size(), " modules");
  return items_[i].module.get();
}

size_t ModuleList::index_of(std::string_view name) const {
  for (size_t i = 0; i < items_.size(); ++i)
    if (items_[i].name == name) return i;
  return items_.size();
}

Module& ModuleList::operator[](std::string_view name) {
  const size_t i = index_of(name);
  if (i == items_.size()) {
    std::string names;
    for (const NamedModule& m : items_) names += (names.empty() ? "" : ", ") + m.name;
    detail::fail<IndexError>(type_name(), ": no module called \"", name, "\" (it has ",
                             names.empty() ? "none" : names, ")");
  }
  return items_[i].module.get();
}

void ModuleList::visit(Visitor& v) {
  for (NamedModule& m : items_) v.slot(m.name, m.module);
}

Sequential Sequential::slice(size_t begin, size_t end) const {
  TD_CHECK_VALUE(begin <= end && end <= items_.size(), "Sequential::slice(", begin, ", ", end,
                 "): out of range for ", items_.size(), " modules");
  Sequential out;
  for (size_t i = begin; i < end; ++i)
    out.items_.push_back({items_[i].name, items_[i].module.shared()});
  return out;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (NamedModule& m : items_) {
    TD_CHECK_VALUE(m.module.has_forward(), "Sequential: module \"", m.name, "\" (",
                   m.module->type_name(),
                   ") has no forward(const Tensor&), so it cannot be chained");
    h = m.module.forward(h);
  }
  return h;
}

}  // namespace tandem::nn
