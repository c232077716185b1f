// nn/moe_routing.h — the router's decisions, apart from the layer (moe.h): the gates of each
// token's k experts, which choices each expert's capacity keeps, and the auxiliary losses.
//
// The capacity and the balance loss count the choices of a routing group: one device's batch,
// which data and expert parallelism cut into rows over ranks. Each rank counts its own choices;
// `ShareCounts` gives every rank's (an all-gather, which a plan provides), and each rank keeps
// the choices one device would keep of the whole batch. Megatron-LM counts each rank's tokens
// alone, so its drops (and the loss's balance term) change with the layout; here they do not.
//
//   N tokens × k choices                 expert 1's queue (capacity 3)
//   token 0: e1 e3   ─┐                  1st choices, in token order: t0 t2 t5 | 2nd: t4 ...
//   token 1: e2 e1    ├─ first choices   kept: t0 t2 t5 (first choices first: GShard's
//   token 2: e1 e0   ─┘  before second   priority); dropped: token 1's and t4's second choices
#pragma once

#include <tandem/core/tensor.h>
#include <tandem/nn/moe_options.h>
#include <functional>
#include <vector>

namespace tandem::nn {

/// Every rank's counts of the routing group, and this rank's index in it.
struct RoutingCounts {
  std::vector<int64_t> all;  // [R][k][E] flattened: rank r's choices j of expert e
  int64_t rank = 0;
};
/// Given this rank's counts [k][E] (flattened): every rank's, in the order of the batch's rows.
/// Null: this rank's tokens are the whole batch.
using ShareCounts = std::function<RoutingCounts(const std::vector<int64_t>& local)>;

/// The router's output for N tokens.
struct Gates {
  Tensor gates;                  // [N, k]: each choice's weight (differentiable)
  Tensor probs;                  // [N, E]: the softmax over all experts (for the balance loss)
  std::vector<int64_t> experts;  // [N·k]: choice n·k + j's expert (j = 0 the token's first)
};

/// The gates of logits [N, E] under `options` (its gating and k).
Gates gate(const Tensor& logits, const MoEOptions& options);

/// Which choices the experts take, and where their rows go.
struct Assignment {
  std::vector<int64_t> tokens;  // the kept choices' tokens, sorted by expert, then by priority
  std::vector<int64_t> counts;  // [E]: this rank's kept choices of each expert
  std::vector<int64_t> slots;   // [N·k]: choice n·k + j's row in `tokens`, or tokens.size()
  std::vector<int64_t> routed;  // [E]: the group's choices of each expert, before any drop
  int64_t dropped = 0;          // the group's choices past an expert's capacity
  int64_t group_tokens = 0;     // the group's N
  int64_t capacity = -1;        // each expert's (−1: dropless)
};

/// The assignment of this rank's choices `experts` [N·k] (Gates::experts).
Assignment assign(const std::vector<int64_t>& experts, int64_t tokens, const MoEOptions& options,
                  const ShareCounts& share = nullptr);

/// α · Switch's balance loss + β · ST-MoE's z-loss, for this rank's logits [N, E] and probs:
///   balance = E · Σ_e f_e · P_e,  f_e = routed_e / (N_group · k) (no gradient),
///                                 P_e = this rank's mean of probs[:, e]
///   z       = mean over tokens of logsumexp(logits)²
/// The ranks' mean of it is one device's for the whole batch (P's mean is the batch's).
Tensor aux_loss(const Tensor& logits, const Tensor& probs, const Assignment& a,
                const MoEOptions& options);

}  // namespace tandem::nn
