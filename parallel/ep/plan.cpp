// parallel/ep/plan.cpp — a walk over the model's MoE layers: each keeps its rank's experts, sends
// tokens to the others' and counts its choices over the rows' group; and the gradients over ep.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/moe.h>
#include <tandem/parallel/all_reduce_gradients.h>
#include <tandem/parallel/ep/dispatch.h>
#include <tandem/parallel/ep/plan.h>
#include <tandem/parallel/tp/regions.h>

namespace tandem::parallel::ep {
namespace {

// The routing group's counts: every rank's [k][E], in the rows' order (one all-gather).
nn::RoutingCounts gathered(const std::vector<int64_t>& local, Communicator& rows) {
  const Tensor mine = from_vector(local, {int64_t(local.size())});
  std::vector<Tensor> parts;
  for (int r = 0; r < rows.size(); ++r) parts.push_back(empty(mine.shape(), mine.options()));
  rows.all_gather(parts, mine)->wait();
  nn::RoutingCounts out{.rank = rows.rank()};
  for (const Tensor& p : parts) {
    const auto v = p.to_vector<int64_t>();
    out.all.insert(out.all.end(), v.begin(), v.end());
  }
  return out;
}

// The stacked tensors of each expert Linear of `m`, by reference (their fields).
std::vector<Tensor*> stacked(nn::MoE& m) {
  std::vector<Tensor*> out;
  for (nn::ExpertLinear* l : {&m.experts.c_fc, &m.experts.c_proj}) {
    out.push_back(&l->weight);
    if (l->bias.defined()) out.push_back(&l->bias);
  }
  return out;
}

}  // namespace

nn::Sequential expert_parallel(const nn::Sequential& model,
                               const std::shared_ptr<Communicator>& group,
                               ExpertParallelOptions options) {
  TD_CHECK_VALUE(group != nullptr, "expert_parallel: no group");
  const std::shared_ptr<Communicator> rows = options.rows ? options.rows : group;
  TD_CHECK_VALUE(rows->size() % group->size() == 0, "expert_parallel: the rows' group (",
                 rows->size(), " ranks) must hold whole ep groups of ", group->size());
  nn::Sequential original = model;  // its modules, the same tensors
  nn::Sequential copy = nn::clone(model);
  auto table = options.placements;
  if (table) table->follow(original.parameters(), copy.parameters());
  // Every tensor recorded under its name (Replicate where no wrapper cut it), so that the
  // table alone describes the model, and the experts' slices inherit their whole's names.
  if (table)
    for (auto& [name, p] : copy.named_parameters()) table->record(p, name);

  const auto layers = nn::moe_layers(copy);
  TD_CHECK_VALUE(!layers.empty(), "expert_parallel: the model has no MoE layer whose experts ",
                 "could be split (give the GPT n_experts and moe_every)");
  const int P = group->size(), r = group->rank();
  if (table) table->add_dimension(kDimension, group);
  for (auto& [name, m] : layers) {
    const int64_t E = m->options.n_experts;
    TD_CHECK_VALUE(E % P == 0, "expert_parallel: ", name, " has ", E,
                   " experts, which do not divide by the expert-parallel size ", P,
                   "\n  hint: choose an ep that divides n_experts");
    const int64_t L = E / P;
    for (Tensor* t : stacked(*m)) {
      Tensor part = tp::sliced_parameter(*t, 0, r * L, L);
      if (table) table->replace(*t, part, kDimension, Shard{.dim = 0});
      *t = part;
    }
    m->dispatch = [group](const Tensor& tokens, const std::vector<int64_t>& counts,
                          const nn::Experts& held) {
      return dispatch_to_experts(tokens, counts, held, group);
    };
  }
  share_routing(copy, rows);
  return copy;
}

void share_routing(nn::Module& model, std::shared_ptr<Communicator> rows) {
  TD_CHECK_VALUE(rows != nullptr, "share_routing: no group");
  for (auto& [name, m] : nn::moe_layers(model))
    m->share_counts = [rows](const std::vector<int64_t>& local) { return gathered(local, *rows); };
}

std::vector<Tensor> expert_parameters(nn::Module& model) {
  std::vector<Tensor> out;
  for (auto& [name, m] : nn::moe_layers(model))
    for (Tensor* t : stacked(*m)) out.push_back(*t);
  return out;
}

void reduce_gradients(const PlacementTable& table) {
  if (!table.has_dimension(kDimension)) return;
  table.check_held("ep::reduce_gradients");
  Communicator& ep = table.group(kDimension);
  std::vector<Tensor> dense, experts;
  for (const PlacedTensor& e : table.entries()) {
    if (!e.local.grad().defined()) continue;
    const Placement p = e.along(kDimension);
    (std::holds_alternative<Replicate>(p) ? dense : experts).push_back(e.local);
  }
  if (ep.size() == 1) return;
  if (!dense.empty()) all_reduce_gradients(dense, ep, ReduceOp::Sum);
  NoGradGuard no_grad;
  const double scale = 1.0 / double(ep.size());
  for (Tensor& t : dense) t.grad().mul_(scale);
  for (Tensor& t : experts) t.grad().mul_(scale);
}

}  // namespace tandem::parallel::ep
