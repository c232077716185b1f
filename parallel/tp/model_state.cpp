// parallel/tp/model_state.cpp — what needs the whole model under tensor parallelism: its whole
// parameters (the slices put back together) and its gradient's norm. Both find the sliced
// tensors by walking the model for the tensor-parallel layers, so they work for any model made
// of them, not only the GPT.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/tp/model_state.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <cmath>

namespace tandem::parallel::tp {
namespace {

// How each sliced parameter of a model was cut: along `dim`, in `stride` blocks.
struct Cut {
  Tensor tensor;
  int64_t dim, stride;
};

class FindCuts : public nn::Visitor {
 public:
  std::vector<Cut> cuts;
  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view, nn::Module& m) override {
    if (auto* c = dynamic_cast<ColumnParallelLinear*>(&m)) {
      cuts.push_back({c->weight, 0, c->options.stride});
      if (c->bias.defined()) cuts.push_back({c->bias, 0, c->options.stride});
    } else if (auto* r = dynamic_cast<RowParallelLinear*>(&m)) {
      cuts.push_back({r->weight, 1, 1});
    } else if (auto* e = dynamic_cast<VocabParallelEmbedding*>(&m)) {
      cuts.push_back({e->weight, 0, 1});
    }
    m.visit(*this);
  }
};

std::vector<Cut> cuts_of(nn::Module& model) {
  FindCuts finder;
  model.visit(finder);
  return finder.cuts;
}

// Every rank's `slice` side by side along `dim`: rank order within each of `stride` blocks.
Tensor put_together(const Tensor& slice, int64_t dim, int64_t stride, Communicator& group) {
  const Tensor mine = slice.contiguous();
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r)
    parts.push_back(empty(mine.shape(), {.dtype = mine.dtype(), .device = mine.device()}));
  group.all_gather(parts, mine)->wait();
  const int64_t rows = mine.size(dim) / stride;
  std::vector<Tensor> pieces;
  for (int64_t b = 0; b < stride; ++b)
    for (const Tensor& part : parts) pieces.push_back(part.narrow(dim, b * rows, rows));
  return cat(pieces, dim);
}

// This rank's part of `whole`: the inverse of put_together.
Tensor slice_of(const Tensor& whole, int64_t dim, int64_t stride, const Communicator& group) {
  const int64_t block = whole.size(dim) / stride, part = block / group.size();
  std::vector<Tensor> pieces;
  for (int64_t b = 0; b < stride; ++b)
    pieces.push_back(whole.narrow(dim, b * block + group.rank() * part, part));
  return cat(pieces, dim).contiguous();
}

const Cut* cut_of(const std::vector<Cut>& cuts, const Tensor& p) {
  for (const Cut& c : cuts)
    if (c.tensor.is_same(p)) return &c;
  return nullptr;
}

// Whether `t` is a state tensor shaped like the slice `p` (a moment), not a scalar (a step count).
bool like(const Tensor& t, const Tensor& p) { return t.shape() == p.shape(); }

// Whether `whole` is `p`'s whole tensor along the cut: p's shape but t times as long in c.dim.
bool whole_of(const Tensor& whole, const Tensor& p, const Cut& c, int t) {
  if (whole.dim() != p.dim()) return false;
  for (int64_t d = 0; d < p.dim(); ++d)
    if (whole.size(d) != (d == c.dim ? p.size(d) * t : p.size(d))) return false;
  return true;
}

// Each entry whole, on the CPU; a tensor under two names (a tied weight) is gathered once.
nn::StateDict whole_entries(const nn::StateDict& entries, nn::Module& model, const Group& group) {
  NoGradGuard no_grad;
  const std::vector<Cut> cuts = cuts_of(model);
  nn::StateDict out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Tensor& p = entries[i].second;
    Tensor whole;
    for (size_t j = 0; j < i && !whole.defined(); ++j)
      if (entries[j].second.is_same(p)) whole = out[j].second;
    if (!whole.defined()) {
      const Cut* c = cut_of(cuts, p);
      whole = (c ? put_together(p.detach(), c->dim, c->stride, *group) : p.detach().clone())
                  .to(Device::cpu());
    }
    out.emplace_back(entries[i].first, whole);
  }
  return out;
}

}  // namespace

nn::StateDict full_parameters(nn::Module& model, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "full_parameters: no tensor-parallel group");
  return whole_entries(model.named_parameters(), model, group);
}

nn::StateDict full_state_dict(nn::Module& model, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "full_state_dict: no tensor-parallel group");
  return whole_entries(model.state_dict(), model, group);
}

optim::OptimizerState full_optimizer_state(nn::Module& model, const optim::Optimizer& optimizer,
                                           const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "full_optimizer_state: no tensor-parallel group");
  NoGradGuard no_grad;
  const std::vector<Cut> cuts = cuts_of(model);
  const std::vector<Tensor> params = optimizer.parameters();
  optim::OptimizerState state = optimizer.state_dict();
  for (auto& [key, t] : state.tensors) {  // the same keys, in the same order, on every rank
    size_t i = 0;
    std::string name;
    const Cut* c = optim::parse_state_key(key, i, name) && i < params.size()
                       ? cut_of(cuts, params[i])
                       : nullptr;
    t = (c && like(t, params[i]) ? put_together(t, c->dim, c->stride, *group) : t.clone())
            .to(Device::cpu());
  }
  return state;
}

void load_full_state_dict(nn::Module& model, const nn::StateDict& whole, const Group& group,
                          std::string_view source) {
  TD_CHECK_VALUE(group != nullptr, "load_full_state_dict: no tensor-parallel group");
  const std::vector<Cut> cuts = cuts_of(model);
  const nn::StateDict mine = model.state_dict();
  nn::StateDict sliced;
  for (const auto& [name, t] : whole) {
    const Tensor* p = nullptr;
    for (const auto& [n, q] : mine)
      if (n == name) p = &q;
    const Cut* c = p ? cut_of(cuts, *p) : nullptr;
    // A tensor that is not this model's whole slice (a wrong shape) goes through unsliced, for
    // load_state_dict's error to name it.
    sliced.emplace_back(
        name, c && whole_of(t, *p, *c, group->size()) ? slice_of(t, c->dim, c->stride, *group) : t);
  }
  model.load_state_dict(sliced, /*strict=*/true, source);
}

void load_full_optimizer_state(nn::Module& model, optim::Optimizer& optimizer,
                               const optim::OptimizerState& whole, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "load_full_optimizer_state: no tensor-parallel group");
  const std::vector<Cut> cuts = cuts_of(model);
  const std::vector<Tensor> params = optimizer.parameters();
  optim::OptimizerState mine = whole;
  for (auto& [key, t] : mine.tensors) {
    size_t i = 0;
    std::string name;
    const Cut* c = optim::parse_state_key(key, i, name) && i < params.size()
                       ? cut_of(cuts, params[i])
                       : nullptr;
    if (c && whole_of(t, params[i], *c, group->size())) t = slice_of(t, c->dim, c->stride, *group);
  }
  optimizer.load_state_dict(mine);
}

// The parameters of `model`, sliced (by a tensor-parallel layer) or replicated.
std::pair<std::vector<Tensor>, std::vector<Tensor>> sliced_and_replicated(nn::Module& model) {
  const std::vector<Cut> cuts = cuts_of(model);
  std::vector<Tensor> sliced, replicated;
  for (const Tensor& p : model.parameters()) {
    bool cut = false;
    for (const Cut& c : cuts) cut = cut || c.tensor.is_same(p);
    (cut ? sliced : replicated).push_back(p);
  }
  return {sliced, replicated};
}

double clip_grad_norm_(nn::Module& model, double max_norm, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "clip_grad_norm_: no tensor-parallel group");
  const auto [sliced, replicated] = sliced_and_replicated(model);
  const std::vector<Tensor> all = model.parameters();
  // The slices' squares summed over the group; the replicated tensors' once (each rank has all).
  Tensor squares = full({1}, optim::grad_square_sum(sliced), {.dtype = kFloat64});
  group->all_reduce(squares)->wait();
  const double norm = std::sqrt(squares.item() + optim::grad_square_sum(replicated));
  optim::scale_grads_to_norm(all, norm, max_norm);
  return norm;
}

void reduce_sequence_parallel_gradients(nn::Module& model, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "reduce_sequence_parallel_gradients: no tensor-parallel group");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : sliced_and_replicated(model).second)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  std::vector<Tensor> flat;
  for (const Tensor& g : grads) flat.push_back(g.contiguous().reshape({-1}));
  Tensor sum = cat(flat, 0);
  group->all_reduce(sum)->wait();
  int64_t at = 0;
  for (Tensor& g : grads) {
    g.copy_(sum.narrow(0, at, g.numel()).reshape(g.shape()));
    at += g.numel();
  }
}

}  // namespace tandem::parallel::tp
