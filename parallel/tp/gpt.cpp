// parallel/tp/gpt.cpp — the GPT's plan as a table, its checks, and its loss.
#include <tandem/core/check.h>
#include <tandem/nn/activation_checkpoint.h>
#include <tandem/parallel/tp/gpt.h>
#include <tandem/parallel/tp/vocab_parallel.h>
#include <numeric>

namespace tandem::parallel::tp {
namespace {

// Every attention of the model: their heads must divide by t (a slice of c_attn's rows that cut a
// head in two would be an error no user could read).
// And whether any block has a dense MLP: a GPT whose every block is a mixture of experts
// (nn/moe.h, GPTConfig::moe_every 1) has no mlp.c_fc for the plan to cut, and its experts stay
// whole on every tensor-parallel rank (expert parallelism splits them: parallel/ep/plan.h).
class Heads : public nn::Visitor {
 public:
  int64_t n_head = 0;
  bool dense_mlp = false;
  void operator()(std::string_view, Tensor&) override {}
  void buffer(std::string_view, Tensor&) override {}
  void operator()(std::string_view, nn::Module& m) override {
    if (auto* a = dynamic_cast<nn::CausalSelfAttention*>(&m)) n_head = a->n_head;
    if (dynamic_cast<nn::MLP*>(&m) != nullptr) dense_mlp = true;
    m.visit(*this);
  }
};

}  // namespace

Plan block_plan() {
  return {{.name = "attn", .cut = Cut::OwnStream},
          {.name = "attn.c_attn", .cut = Cut::Column, .stride = 3},
          {.name = "attn.c_proj", .cut = Cut::Row},
          {.name = "attn.resid_dropout", .cut = Cut::OwnStream, .under_sequence_parallel = true},
          {.name = "mlp.c_fc", .cut = Cut::Column},
          {.name = "mlp.c_proj", .cut = Cut::Row},
          {.name = "mlp.dropout", .cut = Cut::OwnStream, .under_sequence_parallel = true}};
}

Plan gpt_plan() {
  Plan plan = {{.name = "transformer.wte", .cut = Cut::VocabRows},
               {.name = "transformer", .cut = Cut::ScatterSequence}};
  for (const LayerPlan& e : block_plan()) plan.push_back(e);
  plan.push_back({.name = "lm_head", .cut = Cut::VocabHead});
  return plan;
}

nn::Sequential tensor_parallel_gpt(const nn::Sequential& gpt, const Group& group,
                                   TensorParallelOptions options) {
  TD_CHECK_VALUE(group != nullptr, "tensor_parallel_gpt: no tensor-parallel group");
  Heads heads;
  for (const nn::NamedModule& item : gpt.items()) heads("", item.module.get());
  TD_CHECK_VALUE(heads.n_head > 0,
                 "tensor_parallel_gpt: the model has no CausalSelfAttention; "
                 "the plan is nn::gpt's (tp::parallelize takes a plan of any model's)");
  divide(heads.n_head, group->size(), "tensor_parallel_gpt: n_head");
  Plan plan = gpt_plan();
  if (!heads.dense_mlp)
    std::erase_if(plan, [](const LayerPlan& e) { return e.name.starts_with("mlp.c_"); });
  return parallelize(gpt, group, plan, std::move(options));
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t tp_size, int64_t multiple) {
  TD_CHECK_VALUE(vocab_size > 0 && tp_size > 0 && multiple > 0,
                 "padded_vocab_size: expected positive sizes, got vocab_size ", vocab_size,
                 ", tp_size ", tp_size, ", multiple ", multiple);
  const int64_t m = std::lcm(tp_size, multiple);
  return (vocab_size + m - 1) / m * m;
}

Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group) {
  TD_CHECK_SHAPE(logits.dim() == 3, "tp::gpt_loss: logits must be [B, T, V/t], not ",
                 logits.shape());
  return vocab_parallel_cross_entropy(logits, targets, group->rank() * logits.size(2), group);
}

}  // namespace tandem::parallel::tp
