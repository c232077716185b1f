// nn/transformer.h — the pieces of a GPT-2 style transformer block, named and shaped as nanoGPT's
// model.py names them, so that a state dict reads (and PyTorch loads it) the same:
//
//   Block:  x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))          (pre-LayerNorm, residual)
//   CausalSelfAttention: c_attn (C -> 3C: q, k, v), n_head heads, causal fused attention, c_proj
//   MLP:    c_fc (C -> 4C), GELU, c_proj (4C -> C), dropout
//
// The Linears are held in slots (AnyModule): a plan may put another layer of the same interface
// there (tensor parallelism's column and row layers, parallel/tp/plan.h), and the attention then
// runs the heads its c_attn gives it, read from c_attn's output width. The model is written once.
#pragma once

#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/nn/any_module.h>
#include <tandem/nn/dropout.h>
#include <tandem/nn/layer_norm.h>
#include <tandem/nn/linear.h>
#include <tandem/nn/moe_options.h>
#include <functional>

namespace tandem::nn {

/// The sizes every part of a GPT agrees on (nanoGPT's GPTConfig, with the same defaults: GPT-2
/// small).
struct GPTConfig {
  int64_t block_size = 1024;  // the longest context
  int64_t vocab_size = 50304;
  // Rows of the token table when more than vocab_size (Megatron's padded_vocab_size: tensor
  // parallelism splits the table into equal parts). Padding proper, unlike nanoGPT's 50,304
  // (whose extra rows are trained as tokens that never occur): the rows past vocab_size start at
  // zero, no logit is computed from them, so they get no gradient and stay zero, and the model
  // computes exactly what an unpadded one does. 0: vocab_size rows.
  int64_t padded_vocab_size = 0;
  int64_t n_layer = 12, n_head = 12, n_embd = 768;
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms (nanoGPT's train.py sets false)
  GeluApproximate gelu = GeluApproximate::None;  // nanoGPT uses the erf form; GPT-2 the tanh one
  // A mixture of experts (nn::MoE, moe.h) in place of the MLP of blocks 0, moe_every,
  // 2·moe_every, … (Megatron-LM's moe_layer_freq); 0: none, every block dense.
  int64_t moe_every = 0;
  MoEOptions moe = {};
  TensorOptions tensor = {};  // dtype and device of the parameters
};

/// Multi-head masked self-attention: each position attends to itself and the positions before it.
struct CausalSelfAttention : Module {
  explicit CausalSelfAttention(const GPTConfig& config);

  int64_t n_head, n_embd;  // of the whole layer
  double dropout;          // on the attention probabilities, in training
  // The probabilities' dropout stream; null: the device's generator.
  std::shared_ptr<Generator> generator;
  // How the heads attend: qkv [B, T, 3·H·D] as c_attn gives it, H, and the options (causal, the
  // dropout in training) -> [B, H, T, D]. Null: scaled_dot_product_attention_packed over the T
  // positions x holds. A context-parallel plan puts its attention here (parallel/cp/plan.h):
  // x then holds this rank's positions of a longer sequence, and the heads attend over all of it.
  using Attend =
      std::function<Tensor(const Tensor& qkv, int64_t heads, const AttentionOptions& options)>;
  Attend attend;
  AnyModule c_attn;  // nn::Linear(C, 3C): q | k | v of every head (or of some, in a slot's layer)
  AnyModule c_proj;  // nn::Linear(C, C): the heads' outputs back to C
  Dropout resid_dropout;

  /// x [B, T, C] -> [B, T, C]: attention over the H' heads whose q, k, v c_attn's 3·H'·D outputs
  /// hold (all n_head of them, unless a plan cut c_attn); c_proj's input is their H'·D outputs.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
};

struct MLP : Module {
  explicit MLP(const GPTConfig& config);

  AnyModule c_fc;  // nn::Linear(C, 4C)
  GeluApproximate gelu;
  AnyModule c_proj;  // nn::Linear(4C, C)
  Dropout dropout;

  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
};

struct Block : Module {
  /// A block whose mlp is an MLP, or config.moe's nn::MoE when `moe`.
  explicit Block(const GPTConfig& config, bool moe = false);

  LayerNorm ln_1;
  CausalSelfAttention attn;
  LayerNorm ln_2;
  AnyModule mlp;  // MLP or nn::MoE: [B, T, C] -> [B, T, C]

  /// x [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
};

}  // namespace tandem::nn
