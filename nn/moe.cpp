// nn/moe.cpp — the MoE layer: route, dispatch by expert, run the experts, combine by the gates.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/moe.h>
#include <optional>
#include <string>

namespace tandem::nn {

namespace {

// The options, checked before any member is built from them.
const MoEOptions& checked(const MoEOptions& o) {
  TD_CHECK_VALUE(o.n_experts >= 1, "MoE: n_experts must be at least 1, not ", o.n_experts);
  TD_CHECK_VALUE(o.top_k >= 1 && o.top_k <= o.n_experts, "MoE: top_k ", o.top_k,
                 " must be between 1 and n_experts (", o.n_experts, ")");
  TD_CHECK_VALUE(!o.capacity_factor || *o.capacity_factor > 0, "MoE: capacity factor ",
                 o.capacity_factor.value_or(0),
                 " would drop every token\n  hint: give a positive factor (1.25 is Switch's), or "
                 "none for dropless routing");
  return o;
}

}  // namespace

MoE::MoE(const GPTConfig& c)
    : options(checked(c.moe)),
      router(c.n_embd, c.moe.n_experts, {.bias = false, .tensor = c.tensor}),
      experts(c, c.moe.n_experts),
      dropout(c.dropout) {}

Tensor MoE::forward(const Tensor& x) const {
  const int64_t C = router.in_features, E = options.n_experts;
  TD_CHECK_SHAPE(x.dim() >= 2 && x.size(x.dim() - 1) == C, "MoE: input must be [..., ", C,
                 "], not ", x.shape());
  const Tensor flat = x.reshape({x.numel() / C, C});
  const int64_t N = flat.size(0);

  const Tensor logits = router(flat);  // [N, E]
  const Gates g = gate(logits, options);
  const Assignment a = assign(g.experts, N, options, share_counts);
  aux_loss = nn::aux_loss(logits, g.probs, a, options);
  tokens_per_expert = a.routed;
  dropped = a.dropped;

  // Dispatch: row i of the experts' input is token a.tokens[i]; its gradient adds back there.
  const Tensor rows = from_vector(a.tokens, {int64_t(a.tokens.size())}, x.device());
  const Tensor tokens = embedding(flat, rows);  // [M, C]
  TD_CHECK_VALUE(dispatch || experts.size() == E, "MoE: ", experts.size(), " experts held of ", E,
                 ", and no dispatch to the others");
  const Tensor out =
      dispatch ? dispatch(tokens, a.counts, experts) : experts.forward(tokens, a.counts);
  // Combine: each choice reads its expert's row, a dropped one the zero row after them.
  const Tensor padded = cat({out, zeros({1, C}, out.options())}, 0);
  const Tensor slots = from_vector(a.slots, {N, options.top_k}, x.device());
  const Tensor picked = embedding(padded, slots);  // [N, k, C]
  const Tensor y = sum(picked * g.gates.reshape({N, options.top_k, 1}), {1});
  return dropout(y.reshape(x.shape()));
}

void MoE::visit(Visitor& v) {
  v("router", router);
  v("experts", experts);
  v("dropout", dropout);
}

std::string MoE::extra_repr() const {
  return tandem::str(
      "n_experts=", options.n_experts, ", top_k=", options.top_k,
      ", gating=", options.gating == Gating::SoftmaxTopK ? "softmax-topk" : "topk-softmax",
      ", capacity_factor=",
      options.capacity_factor ? tandem::str(*options.capacity_factor) : std::string("dropless"));
}

namespace {

// Every MoE below a module, with its dotted name.
class MoEFinder : public Visitor {
 public:
  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view name, Module& child) override {
    const std::string before = prefix_;
    if (!prefix_.empty()) prefix_.push_back('.');
    prefix_.append(name);
    if (auto* m = dynamic_cast<MoE*>(&child)) found.emplace_back(prefix_, m);
    child.visit(*this);
    prefix_ = before;
  }
  std::vector<std::pair<std::string, MoE*>> found;

 private:
  std::string prefix_;
};

}  // namespace

std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model) {
  MoEFinder f;
  if (auto* m = dynamic_cast<MoE*>(&model)) f.found.emplace_back("", m);
  model.visit(f);
  return f.found;
}

Tensor moe_aux_loss(Module& model) {
  Tensor total;
  for (auto& [name, m] : moe_layers(model))
    if (m->aux_loss.defined()) total = total.defined() ? total + m->aux_loss : m->aux_loss;
  if (total.defined()) return total;
  const auto params = model.parameters();
  return zeros({}, params.empty() ? TensorOptions{} : params.front().options());
}

}  // namespace tandem::nn
