// parallel/clip_grad_norm.cpp — local squares of what this rank counts, one sum per dividing
// dimension, optim's scaling.
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/all_reduce_gradients.h>
#include <tandem/parallel/clip_grad_norm.h>
#include <cmath>

namespace tandem::parallel {
namespace {

// Whether this rank counts entry `e`'s squares: along every dimension the table divides, a
// replicated tensor counts on coordinate 0 alone (a pipeline's stages hold theirs alone).
bool counts_here(const PlacementTable& table, const PlacedTensor& e) {
  if (!e.counted) return false;
  for (const PlacementTable::Dimension& d : table.dimensions()) {
    if (d.across == Across::Stages || !table.divides(d.name)) continue;
    const Placement p = e.along(d.name);
    const bool replicated =
        std::holds_alternative<Replicate>(p) || std::holds_alternative<Partial>(p);
    if (replicated && d.group->rank() != 0) return false;
  }
  return true;
}

}  // namespace

double grad_norm(const PlacementTable& table) {
  table.check_held("grad_norm");
  std::vector<Tensor> counted;
  for (const PlacedTensor& e : table.entries())
    if (counts_here(table, e)) counted.push_back(e.local);
  const auto& entries = table.entries();
  const Device device = entries.empty() ? Device::cpu() : entries.front().local.device();
  Tensor total = full({1}, optim::grad_square_sum(counted), {.dtype = kFloat64, .device = device});
  for (const PlacementTable::Dimension& d : table.dimensions())
    if (table.divides(d.name)) d.group->all_reduce(total, ReduceOp::Sum)->wait();
  return std::sqrt(total.to(Device::cpu()).data<double>()[0]);
}

double clip_grad_norm_(const PlacementTable& table, double max_norm) {
  const double norm = grad_norm(table);
  optim::scale_grads_to_norm(table.tensors(), norm, max_norm);
  return norm;
}

void reduce_partial_gradients(const PlacementTable& table) {
  table.check_held("reduce_partial_gradients");
  for (const PlacementTable::Dimension& d : table.dimensions()) {
    std::vector<Tensor> partial;
    for (const PlacedTensor& e : table.entries())
      if (std::holds_alternative<Partial>(e.along(d.name))) partial.push_back(e.local);
    if (!partial.empty()) all_reduce_gradients(partial, *d.group);
  }
}

}  // namespace tandem::parallel
