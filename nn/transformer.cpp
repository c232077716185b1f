// nn/transformer.cpp — CausalSelfAttention, MLP and Block.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/moe.h>
#include <tandem/nn/transformer.h>

namespace tandem::nn {

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : n_head(c.n_head),
      n_embd(c.n_embd),
      dropout(c.dropout),
      c_attn(Linear(c.n_embd, 3 * c.n_embd, {.bias = c.bias, .tensor = c.tensor})),
      c_proj(Linear(c.n_embd, c.n_embd, {.bias = c.bias, .tensor = c.tensor})),
      resid_dropout(c.dropout) {
  TD_CHECK_VALUE(c.n_head > 0 && c.n_embd % c.n_head == 0, "CausalSelfAttention: n_embd ", c.n_embd,
                 " must split evenly into n_head ", c.n_head, " heads");
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  TD_CHECK_SHAPE(x.dim() == 3 && x.size(2) == n_embd, "CausalSelfAttention: input must be [B, T, ",
                 n_embd, "], not ", x.shape());
  // One matmul makes q, k and v side by side; attention takes them as they are, in heads
  // [B, H, T, D], and gives their gradient back as one tensor. The sizes are qkv's: a plan's
  // c_attn may give some of the heads, over more positions than x has (sequence parallelism).
  const Tensor qkv = c_attn(x);
  const int64_t B = qkv.size(0), T = qkv.size(1), D = n_embd / n_head, H = qkv.size(2) / (3 * D);
  TD_CHECK_SHAPE(qkv.dim() == 3 && H > 0 && qkv.size(2) == 3 * H * D,
                 "CausalSelfAttention: c_attn gives ", qkv.shape(), ", not [B, T, 3·H·", D,
                 "] (q, k and v of H heads of ", D, ")");
  const double p = is_training() ? dropout : 0.0;
  const Tensor y = with_generator(p > 0 ? generator : nullptr, x.device(), [&] {
    const AttentionOptions options{.causal = true, .dropout_p = p};
    return attend ? attend(qkv, H, options) : scaled_dot_product_attention_packed(qkv, H, options);
  });
  // The heads side by side again: [B, H, T, D] -> [B, T, H·D].
  return resid_dropout(c_proj(y.transpose(1, 2).reshape({B, T, H * D})));
}

void CausalSelfAttention::visit(Visitor& v) {
  v.slot("c_attn", c_attn);
  v.slot("c_proj", c_proj);
  v("resid_dropout", resid_dropout);
}

MLP::MLP(const GPTConfig& c)
    : c_fc(Linear(c.n_embd, 4 * c.n_embd, {.bias = c.bias, .tensor = c.tensor})),
      gelu(c.gelu),
      c_proj(Linear(4 * c.n_embd, c.n_embd, {.bias = c.bias, .tensor = c.tensor})),
      dropout(c.dropout) {}

Tensor MLP::forward(const Tensor& x) const { return dropout(c_proj(tandem::gelu(c_fc(x), gelu))); }

void MLP::visit(Visitor& v) {
  v.slot("c_fc", c_fc);
  v.slot("c_proj", c_proj);
  v("dropout", dropout);
}

Block::Block(const GPTConfig& c, bool moe)
    : ln_1(c.n_embd, {.bias = c.bias, .tensor = c.tensor}),
      attn(c),
      ln_2(c.n_embd, {.bias = c.bias, .tensor = c.tensor}),
      mlp(moe ? AnyModule(MoE(c)) : AnyModule(MLP(c))) {}

Tensor Block::forward(const Tensor& x) const {
  const Tensor h = x + attn(ln_1(x));
  return h + mlp.forward(ln_2(h));
}

void Block::visit(Visitor& v) {
  v("ln_1", ln_1);
  v("attn", attn);
  v("ln_2", ln_2);
  v.slot("mlp", mlp);
}

}  // namespace tandem::nn
