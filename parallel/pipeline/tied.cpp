// parallel/pipeline/tied.cpp — summing the gradients of tied copies, and counting them once.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/parallel/pipeline/tied.h>
#include <map>
#include <set>

namespace tandem::parallel {
namespace {

// The copies of each tied parameter, by name, in stage order (distinct tensors only: stages on
// one device share the tensor itself).
std::map<std::string, std::vector<Tensor>> copies_by_name(std::vector<Stage>& stages) {
  std::map<std::string, std::vector<Tensor>> out;
  for (Stage& s : stages)
    for (auto& [name, t] : s.tied) {
      std::vector<Tensor>& copies = out[name];
      bool seen = false;
      for (const Tensor& c : copies) seen = seen || c.is_same(t);
      if (!seen) copies.push_back(t);
    }
  return out;
}

// Each copy after the first takes the first's gradient.
void copy_first_gradient(const std::vector<Tensor>& copies) {
  const Tensor g = copies[0].grad();
  for (size_t i = 1; i < copies.size(); ++i)
    copies[i].set_grad(g.defined() ? g.to(copies[i].device()) : Tensor());
}

}  // namespace

TiedGradients tied_gradients_before(std::vector<Stage>& stages) {
  NoGradGuard no_grad;
  TiedGradients out;
  for (auto& [name, copies] : copies_by_name(stages))
    for (const Tensor& c : copies)
      out[name].push_back(c.grad().defined() ? c.grad().clone() : Tensor());
  return out;
}

void sum_tied_gradients(std::vector<Stage>& stages, const TiedGradients& before) {
  NoGradGuard no_grad;
  for (auto& [name, copies] : copies_by_name(stages)) {
    if (copies.size() < 2) continue;
    const auto it = before.find(name);
    const std::vector<Tensor> none(copies.size());
    const std::vector<Tensor>& held = it == before.end() ? none : it->second;
    // What the copies held (all alike, after the last sum), plus each copy's gain since.
    Tensor sum = held[0].defined() ? held[0].clone() : Tensor();
    for (size_t i = 0; i < copies.size(); ++i) {
      if (!copies[i].grad().defined()) continue;
      Tensor gain = copies[i].grad().to(copies[0].device());
      if (held[i].defined()) gain = gain - held[i].to(copies[0].device());
      sum = sum.defined() ? sum + gain : gain.clone();
    }
    copies[0].set_grad(sum);
    copy_first_gradient(copies);
  }
}

PlacementTable placements(std::vector<Stage>& stages) {
  std::set<const TensorImpl*> later_copies;
  for (auto& [name, copies] : copies_by_name(stages))
    for (size_t i = 1; i < copies.size(); ++i) later_copies.insert(&copies[i].impl());
  PlacementTable table;
  for (Stage& s : stages)
    for (auto& [name, p] : s.modules.named_parameters()) {
      // A later copy is named as the weight it copies (one device's first name).
      std::string whole = name;
      for (const auto& [first, copy] : s.tied)
        if (copy.is_same(p) && later_copies.count(&p.impl())) whole = first;
      table.record(p, whole).counted = !later_copies.count(&p.impl());
    }
  return table;
}

}  // namespace tandem::parallel
