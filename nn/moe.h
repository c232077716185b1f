// nn/moe.h — a mixture of experts in the place of a GPT block's MLP (Switch, Mixtral): a router
// sends each token to k of E experts (each the GPT's MLP), weighs their outputs by its gates and
// adds them; an expert past its capacity drops what it cannot take (moe_options.h).
//
//   x [B, T, C] -> N = B·T tokens
//   router: Linear(C, E) ─▶ logits [N, E] ─▶ gates [N, k], experts of each choice (moe_routing.h)
//   dispatch: the kept choices' tokens, grouped by expert       [M, C]  (M ≤ N·k)
//   experts:  one GEMM per expert (experts.h)                   [M, C]
//   combine:  y[n] = Σ_j gate[n, j] · out[slot(n, j)]           [N, C]  (a dropped choice: 0)
//
// Dispatch and combine are row lookups (nn::embedding's gather, whose backward adds rows back),
// so the layer's backward is the ops' own. aux_loss holds the last forward's auxiliary losses:
// add moe_aux_loss(model) to the training loss. Expert parallelism (parallel/ep/plan.h) fills
// the two hooks: the group's counts, and the experts held on other ranks.
#pragma once

#include <tandem/nn/dropout.h>
#include <tandem/nn/experts.h>
#include <tandem/nn/linear.h>
#include <tandem/nn/moe_routing.h>
#include <functional>

namespace tandem::nn {

struct MoE : Module {
  /// The MoE of config.moe, its experts config's MLPs. ValueError for E < 1, k outside [1, E],
  /// a capacity factor that is not positive (it would drop every token).
  explicit MoE(const GPTConfig& config);

  MoEOptions options;
  Linear router;    // C -> E, no bias
  Experts experts;  // all E, or this rank's E/ep under expert parallelism
  Dropout dropout;  // on the output, as the MLP's

  // The routing group's counts (moe_routing.h). Null: this rank's tokens are the whole batch.
  ShareCounts share_counts;
  // How the tokens reach the experts: tokens [M, C] sorted by expert, counts[e] for each of the
  // E experts, and the experts held here -> their outputs in the same order. Null: `experts`,
  // all held here. Expert parallelism sends each rank the rows of the experts it holds, and
  // their outputs back. The layer hands its experts in, so that a copy's hook runs the copy's.
  using Dispatch = std::function<Tensor(const Tensor& tokens, const std::vector<int64_t>& counts,
                                        const Experts& held)>;
  Dispatch dispatch;

  // What the last forward routed: its auxiliary loss (differentiable), the group's choices of
  // each expert before drops, and the group's choices dropped.
  mutable Tensor aux_loss;
  mutable std::vector<int64_t> tokens_per_expert;
  mutable int64_t dropped = 0;

  /// x [B, T, C] (or [N, C]) -> the same shape.
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  void visit(Visitor& v) override;
  std::string extra_repr() const override;
};

/// The sum of the aux_loss of every MoE in `model` from its last forward; a zero scalar when it
/// has none (or none ran). Add it to the loss before backward, after the forward has run: in
/// `gpt_loss(model(x), y) + moe_aux_loss(model)` C++ may call moe_aux_loss first (the operands
/// of + are unsequenced), so compute the logits in a statement of their own.
Tensor moe_aux_loss(Module& model);

/// Every MoE in `model`, with its dotted name ("transformer.h.0.mlp").
std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model);

}  // namespace tandem::nn
