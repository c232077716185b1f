// nn/moe_options.h — what a mixture-of-experts layer is (nn::MoE, moe.h): how many experts, how
// many of them each token goes to, where the gates' softmax is taken, how many tokens an expert
// takes, and the weights of its two auxiliary losses. GPTConfig holds one (an MoE block every
// moe_every blocks).
#pragma once

#include <cstdint>
#include <optional>

namespace tandem::nn {

/// Where the softmax over the router's logits is taken: the papers differ.
enum class Gating {
  // Switch (k = 1), GShard, DeepSeek: probabilities over all E experts; a token's k largest are
  // its gates as they are (they sum to less than 1 when k > 1).
  SoftmaxTopK,
  // Mixtral: the k largest logits, then a softmax over those k (the gates sum to 1).
  TopKSoftmax,
};

struct MoEOptions {
  int64_t n_experts = 8;  // E
  int64_t top_k = 2;      // k: 1 is Switch's, 2 Mixtral's
  Gating gating = Gating::TopKSoftmax;
  // Switch's expert capacity: each expert computes at most ceil(capacity_factor · N · k / E) of
  // the N·k choices of a batch's N tokens; a choice past it is dropped (it adds nothing: the
  // token passes on the residual). First choices come before second ones, and each in token
  // order (GShard's priority). nullopt: dropless, every choice computed (Mixtral, MegaBlocks).
  std::optional<double> capacity_factor;
  double aux_loss_weight = 0.01;  // α of Switch's load-balancing loss (0: none)
  double z_loss_weight = 0.001;   // of ST-MoE's router z-loss (0: none)
  // Each expert's hidden width (Megatron-LM's moe_ffn_hidden_size); 0: 4·C, the dense MLP's. E
  // experts of 4C/k each, top-k, cost what the dense MLP costs per token (fine-grained experts).
  int64_t ffn_hidden_size = 0;
};

}  // namespace tandem::nn
