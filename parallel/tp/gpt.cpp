// parallel/tp/gpt.cpp — the GPT's modules with Megatron's plan (gpt.h): each is made from the
// whole module and keeps its slices; forward is nn/transformer.cpp's with this rank's heads.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/parallel/tp/gpt.h>
#include <optional>

namespace tandem::parallel::tp {
namespace {

// c_attn, once the heads are known to divide (checked first: a slice of rows that cut a head in
// two would be the error a user could not read).
const nn::Linear& c_attn_of(const nn::CausalSelfAttention& whole, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "ParallelAttention: no tensor-parallel group");
  divide(whole.n_head, group->size(), "ParallelAttention: n_head");
  return whole.c_attn;
}

}  // namespace

ParallelAttention::ParallelAttention(const nn::CausalSelfAttention& whole, Group group)
    : n_head(whole.n_head),
      n_embd(whole.n_embd),
      dropout(whole.dropout),
      c_attn(c_attn_of(whole, group), group, {.stride = 3}),
      c_proj(whole.c_proj, group),
      resid_dropout(whole.resid_dropout.p) {
  // Per-rank attention dropout: the probabilities of different heads must get different masks,
  // as on one device, so the draws inside the region come from a stream of this rank's own
  // (Megatron's model-parallel RNG); outside, every rank draws the same as the others.
  const uint64_t seed = default_generator(whole.c_attn.weight.device()).get_state().seed;
  region_generator = std::make_shared<Generator>(seed + 2718 + uint64_t(group->rank()));
}

Tensor ParallelAttention::forward(const Tensor& x) const {
  TD_CHECK_SHAPE(x.dim() == 3 && x.size(2) == n_embd, "ParallelAttention: input must be [B, T, ",
                 n_embd, "], not ", x.shape());
  const int64_t B = x.size(0), T = x.size(1), D = n_embd / n_head;
  const int64_t H = n_head / c_attn.group->size(), C = H * D;  // this rank's heads
  const Tensor qkv = c_attn(x);                                // [B, T, 3·C]: q | k | v
  auto heads = [&](int64_t i) {
    return qkv.narrow(2, i * C, C).view({B, T, H, D}).transpose(1, 2);
  };
  const double p = is_training() ? dropout : 0.0;
  Tensor y;
  {
    std::optional<ReplayGenerators> region;
    if (p > 0) region.emplace(std::vector{std::pair{x.device(), region_generator->get_state()}});
    y = scaled_dot_product_attention(heads(0), heads(1), heads(2),
                                     {.causal = true, .dropout_p = p});
    if (p > 0) region_generator->set_state(ReplayGenerators::find(x.device())->get_state());
  }
  return resid_dropout(c_proj(y.transpose(1, 2).reshape({B, T, C})));
}

void ParallelAttention::visit(nn::Visitor& v) {
  v("c_attn", c_attn);
  v("c_proj", c_proj);
  v("resid_dropout", resid_dropout);
}

ParallelMLP::ParallelMLP(const nn::MLP& whole, Group group)
    : c_fc(whole.c_fc, group),
      gelu(whole.gelu),
      c_proj(whole.c_proj, group),
      dropout(whole.dropout.p) {}

Tensor ParallelMLP::forward(const Tensor& x) const {
  return dropout(c_proj(tandem::gelu(c_fc(x), gelu)));
}

void ParallelMLP::visit(nn::Visitor& v) {
  v("c_fc", c_fc);
  v("c_proj", c_proj);
  v("dropout", dropout);
}

ParallelBlock::ParallelBlock(const nn::Block& whole, const Group& group)
    : ln_1(nn::clone(whole.ln_1)),
      attn(whole.attn, group),
      ln_2(nn::clone(whole.ln_2)),
      mlp(whole.mlp, group) {}

Tensor ParallelBlock::forward(const Tensor& x) const {
  const Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

void ParallelBlock::visit(nn::Visitor& v) {
  v("ln_1", ln_1);
  v("attn", attn);
  v("ln_2", ln_2);
  v("mlp", mlp);
}

ParallelGPTEmbedding::ParallelGPTEmbedding(const nn::GPTEmbedding& whole, const Group& group)
    : block_size(whole.block_size),
      wte(whole.wte, group),
      wpe(nn::clone(whole.wpe)),
      drop(whole.drop.p) {}

Tensor ParallelGPTEmbedding::forward(const Tensor& ids) const {
  TD_CHECK_SHAPE(ids.dim() == 2, "GPT: token ids must be [B, T], not ", ids.shape());
  const int64_t T = ids.size(1);
  TD_CHECK_SHAPE(T <= block_size, "GPT: a sequence of ", T,
                 " tokens is longer than the block size ", block_size);
  const Tensor positions = arange(double(T), {.dtype = kInt64, .device = ids.device()});
  return drop(wte(ids) + wpe(positions));
}

void ParallelGPTEmbedding::visit(nn::Visitor& v) {
  v("wte", wte);
  v("wpe", wpe);
  v("drop", drop);
}

Tensor ParallelLMHead::forward(const Tensor& x) const {
  // Every rank reads the whole x, so x's gradient is the sum of every rank's part (f).
  return linear(copy_to_tensor_parallel_region(x, group), weight, Tensor());
}

nn::Sequential tensor_parallel_gpt(nn::Sequential& gpt, const Group& group) {
  TD_CHECK_VALUE(group != nullptr, "tensor_parallel_gpt: no tensor-parallel group");
  nn::Sequential out;
  for (const nn::NamedModule& item : gpt.items()) {
    nn::Module& m = item.module.get();
    if (auto* e = dynamic_cast<nn::GPTEmbedding*>(&m)) {
      out.push_back(item.name, ParallelGPTEmbedding(*e, group));
    } else if (auto* b = dynamic_cast<nn::Block*>(&m)) {
      out.push_back(item.name, ParallelBlock(*b, group));
    } else if (auto* ln = dynamic_cast<nn::LayerNorm*>(&m)) {
      out.push_back(item.name, nn::clone(*ln));
    } else if (dynamic_cast<nn::LMHead*>(&m) != nullptr) {
      // The tie, kept: the head's weight is this rank's slice of the table, the same tensor.
      out.push_back(item.name, ParallelLMHead(out.at<ParallelGPTEmbedding>(0).wte.weight, group));
    } else {
      TD_CHECK_VALUE(false, "tensor_parallel_gpt: item '", item.name, "' (", m.type_name(),
                     ") is not part of nn::gpt's model; the plan knows GPTEmbedding, Block, "
                     "LayerNorm and LMHead");
    }
  }
  return out;
}

Tensor gpt_loss(const Tensor& logits, const Tensor& targets, const Group& group) {
  TD_CHECK_SHAPE(logits.dim() == 3, "tp::gpt_loss: logits must be [B, T, V/t], not ",
                 logits.shape());
  return vocab_parallel_cross_entropy(logits, targets, group->rank() * logits.size(2), group);
}

}  // namespace tandem::parallel::tp
