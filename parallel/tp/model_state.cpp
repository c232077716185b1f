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

}  // namespace

nn::StateDict full_parameters(nn::Module& model, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "full_parameters: no tensor-parallel group");
  NoGradGuard no_grad;
  const std::vector<Cut> cuts = cuts_of(model);
  nn::StateDict out;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor whole = p.detach().clone();
    for (const Cut& c : cuts)
      if (c.tensor.is_same(p)) whole = put_together(p.detach(), c.dim, c.stride, *group);
    out.emplace_back(name, whole.to(Device::cpu()));
  }
  return out;
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
