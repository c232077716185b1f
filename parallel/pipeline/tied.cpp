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

}  // namespace

TiedGradients tied_gradients_before(std::vector<Stage>& stages) {
  NoGradGuard no_grad;
  TiedGradients out;
  for (auto& [name, copies] : copies_by_name(stages))
    for (const Tensor& c : copies)
      out[name].push_back(c.grad().defined() ? c.grad().clone() : Tensor());
  return out;
}

void sum_tied_copies(const std::vector<Tensor>& copies, const std::vector<Tensor>& before,
                     Communicator* across) {
  NoGradGuard no_grad;
  const Device dev = copies[0].device();
  Tensor total;  // what the copies gained, summed on the first copy's device
  for (size_t i = 0; i < copies.size(); ++i) {
    const Tensor g = copies[i].grad();
    if (!g.defined()) continue;
    Tensor gain = g.to(dev);
    if (before[i].defined()) gain = gain - before[i].to(dev);
    total = total.defined() ? total + gain : gain;
  }
  if (across != nullptr) {
    if (!total.defined())
      total = zeros(copies[0].shape(), {.dtype = copies[0].dtype(), .device = dev});
    across->all_reduce(total)->wait();
  }
  if (!total.defined()) return;  // no copy gained anything: they stay as they were
  const Tensor sum = before[0].defined() ? before[0].to(dev) + total : total;
  for (const Tensor& c : copies) {
    Tensor g = c.grad();
    if (!g.defined()) {
      c.set_grad(sum.to(c.device()).clone());  // its own tensor: .grad never aliases another
    } else if (g.address() != sum.address()) {
      g.copy_(sum);
    }
  }
}

void sum_tied_gradients(std::vector<Stage>& stages, const TiedGradients& before) {
  for (auto& [name, copies] : copies_by_name(stages)) {
    if (copies.size() < 2) continue;
    const auto it = before.find(name);
    sum_tied_copies(copies, it == before.end() ? std::vector<Tensor>(copies.size()) : it->second,
                    nullptr);
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
