// nn/container.cpp — ModuleList and Sequential.
#include <tandem/nn/container.h>

namespace tandem::nn {

ModuleList::ModuleList(const ModuleList& other) : Module(other) {
  for (const Item& it : other.items_) items_.push_back({it.copy(*it.module), it.copy});
}

ModuleList& ModuleList::operator=(const ModuleList& other) {
  if (this == &other) return *this;
  Module::operator=(other);
  items_.clear();
  for (const Item& it : other.items_) items_.push_back({it.copy(*it.module), it.copy});
  return *this;
}

void ModuleList::add(std::shared_ptr<Module> module, Copier copy) {
  items_.push_back({std::move(module), std::move(copy)});
}

Module& ModuleList::operator[](size_t i) {
  TD_CHECK_INDEX(i < items_.size(), "ModuleList: index ", i, " is out of range for ", items_.size(),
                 " modules");
  return *items_[i].module;
}

void ModuleList::visit(Visitor& v) {
  for (size_t i = 0; i < items_.size(); ++i) v(std::to_string(i), *items_[i].module);
}

Sequential Sequential::slice(size_t begin, size_t end) const {
  TD_CHECK_VALUE(begin <= end && end <= items_.size(), "Sequential::slice(", begin, ", ", end,
                 "): out of range for ", items_.size(), " modules");
  Sequential out;
  out.items_.assign(items_.begin() + long(begin), items_.begin() + long(end));
  out.forwards_.assign(forwards_.begin() + long(begin), forwards_.begin() + long(end));
  return out;
}

Tensor Sequential::forward(const Tensor& x) {
  TD_CHECK_VALUE(forwards_.size() == items_.size(),
                 "Sequential: every module needs forward(const Tensor&)");
  Tensor h = x;
  for (size_t i = 0; i < items_.size(); ++i) h = forwards_[i](*items_[i].module, h);
  return h;
}

}  // namespace tandem::nn
