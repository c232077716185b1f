// parallel/tp/model_state.cpp — what needs the whole model under tensor parallelism: its whole
// parameters (the slices put back together). It finds the sliced tensors by walking the model
// for the tensor-parallel layers, so it works for any model made of them, not only the GPT.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/optim/optimizer.h>
#include <tandem/parallel/tp/gpt.h>
#include <tandem/parallel/tp/model_state.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <map>

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
    } else if (auto* h = dynamic_cast<ParallelLMHead*>(&m)) {
      // wte's slice again, but a pipeline's last stage holds lm_head alone.
      cuts.push_back({h->weight, 0, 1});
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
  return rank_slice(whole, dim, stride, group.rank(), group.size());
}

const Cut* cut_of(const std::vector<Cut>& cuts, const Tensor& p) {
  for (const Cut& c : cuts)
    if (c.tensor.is_same(p)) return &c;
  return nullptr;
}

// Each cut tensor of `model` by the names model.state_dict() gives it (a tied weight has two).
std::map<std::string, Cut> cuts_by_name(nn::Module& model) {
  const std::vector<Cut> cuts = cuts_of(model);
  std::map<std::string, Cut> out;
  for (const auto& [name, t] : model.state_dict())
    if (const Cut* c = cut_of(cuts, t)) out.emplace(name, *c);
  return out;
}

// Whether `t` (a whole tensor, or a per-element optimizer state) can be cut as `c` cuts.
bool divisible(const Tensor& t, const Cut& c, int ranks) {
  return t.dim() > c.dim && t.size(c.dim) % (c.stride * ranks) == 0;
}

// The cut of optimizer state key `key` ("state.<i>.<name>"): its parameter's, for a tensor with
// one value per element (Adam's moments); none for a scalar (a step count) or another key.
const Cut* cut_of_state(const std::string& key, const Tensor& t, const std::vector<Cut>& cuts,
                        const std::vector<Tensor>& params) {
  size_t i = 0;
  std::string name;
  if (t.dim() == 0 || !optim::parse_state_key(key, i, name) || i >= params.size()) return nullptr;
  return cut_of(cuts, params[i]);
}

}  // namespace

nn::StateDict put_slices_together(nn::Module& model, const nn::StateDict& slices,
                                  const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "put_slices_together: no tensor-parallel group");
  NoGradGuard no_grad;
  const std::map<std::string, Cut> cuts = cuts_by_name(model);
  nn::StateDict out;
  for (size_t i = 0; i < slices.size(); ++i) {  // the same names, in the same order, everywhere
    const auto& [name, t] = slices[i];
    Tensor whole;
    for (size_t j = 0; j < i && !whole.defined(); ++j)  // a tied tensor: gathered once
      if (slices[j].second.is_same(t)) whole = out[j].second;
    if (!whole.defined()) {
      const auto c = cuts.find(name);
      whole = (c != cuts.end() ? put_together(t.detach(), c->second.dim, c->second.stride, *group)
                               : t.detach().clone())
                  .to(Device::cpu());
    }
    out.emplace_back(name, whole);
  }
  return out;
}

nn::StateDict full_parameters(nn::Module& model, const Group& group) {
  return put_slices_together(model, model.named_parameters(), group);
}

nn::StateDict full_state_dict(nn::Module& model, const Group& group) {
  return put_slices_together(model, model.state_dict(), group);
}

optim::OptimizerState put_slices_together(nn::Module& model, const optim::Optimizer& optimizer,
                                          optim::OptimizerState slices, const Group& group) {
  return put_slices_together(model, optimizer.parameters(), std::move(slices), group);
}

optim::OptimizerState put_slices_together(nn::Module& model, const std::vector<Tensor>& params,
                                          optim::OptimizerState slices, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "put_slices_together: no tensor-parallel group");
  NoGradGuard no_grad;
  const std::vector<Cut> cuts = cuts_of(model);
  for (auto& [key, t] : slices.tensors) {  // the same keys, in the same order, on every rank
    const Cut* c = cut_of_state(key, t, cuts, params);
    t = (c ? put_together(t, c->dim, c->stride, *group) : t.clone()).to(Device::cpu());
  }
  return slices;
}

optim::OptimizerState full_optimizer_state(nn::Module& model, const optim::Optimizer& optimizer,
                                           const Group& group) {
  return put_slices_together(model, optimizer, optimizer.state_dict(), group);
}

nn::StateDict slices_of(nn::Module& model, const nn::StateDict& whole, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "slices_of: no tensor-parallel group");
  const std::map<std::string, Cut> cuts = cuts_by_name(model);
  nn::StateDict out;
  for (const auto& [name, t] : whole) {
    const auto c = cuts.find(name);
    // A tensor that cannot be this model's whole (a wrong shape) goes through unsliced, for the
    // load's error to name it.
    const bool cut = c != cuts.end() && divisible(t, c->second, group->size());
    out.emplace_back(name, cut ? slice_of(t, c->second.dim, c->second.stride, *group) : t);
  }
  return out;
}

optim::OptimizerState slices_of(nn::Module& model, const optim::Optimizer& optimizer,
                                const optim::OptimizerState& whole, const Group& group) {
  return slices_of(model, optimizer.parameters(), whole, group);
}

optim::OptimizerState slices_of(nn::Module& model, const std::vector<Tensor>& params,
                                const optim::OptimizerState& whole, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "slices_of: no tensor-parallel group");
  const std::vector<Cut> cuts = cuts_of(model);
  optim::OptimizerState out = whole;
  for (auto& [key, t] : out.tensors) {
    const Cut* c = cut_of_state(key, t, cuts, params);
    if (c && divisible(t, *c, group->size())) t = slice_of(t, c->dim, c->stride, *group);
  }
  return out;
}

void load_full_state_dict(nn::Module& model, const nn::StateDict& whole, const Group& group,
                          std::string_view source) {
  model.load_state_dict(slices_of(model, whole, group), /*strict=*/true, source);
}

void load_full_optimizer_state(nn::Module& model, optim::Optimizer& optimizer,
                               const optim::OptimizerState& whole, const Group& group) {
  optimizer.load_state_dict(slices_of(model, optimizer, whole, group));
}

}  // namespace tandem::parallel::tp
