// nn/experts.h — E copies of the GPT's MLP (c_fc: C -> 4C, GELU, c_proj: 4C -> C) whose weights
// are stacked, one tensor per kind: experts.c_fc.weight [E, 4C, C], as torchtitan's
// GroupedExperts holds them. Stacked, so that expert parallelism cuts one tensor along dim 0
// (Shard(0) over "ep"), a state dict names E experts the same way under any cut, and each
// expert's rows form one GEMM:
//
//   tokens [M, C], sorted by expert        counts {3, 0, 2, ...}
//   ┌───────────┐
//   │ expert 0  │ 3 rows  ──  x₀·W₀ᵀ + b₀   one GEMM each
//   │ expert 2  │ 2 rows  ──  x₂·W₂ᵀ + b₂   (an expert with no rows runs none)
//   │ ...       │
//   └───────────┘
#pragma once

#include <tandem/nn/linear.h>
#include <tandem/nn/transformer.h>
#include <vector>

namespace tandem::nn {

/// One Linear per expert, stacked: weight [E, out, in], bias [E, out]. Each expert is drawn as
/// torch.nn.Linear draws one: uniform in ±1/√in.
struct ExpertLinear : Module {
  ExpertLinear(int64_t experts, int64_t in_features, int64_t out_features,
               LinearOptions options = {});

  int64_t in_features, out_features;
  Tensor weight;  // [E, out_features, in_features]
  Tensor bias;    // [E, out_features], undefined without bias

  int64_t experts() const { return weight.size(0); }
  /// x [M, in] sorted by expert, counts[e] rows for expert e (Σ counts = M) -> [M, out].
  Tensor forward(const Tensor& x, const std::vector<int64_t>& counts) const;
  void visit(Visitor& v) override;
  std::string extra_repr() const override;
};

struct Experts : Module {
  /// `n_experts` MLPs of the config's width (its bias, GELU and parameter options).
  Experts(const GPTConfig& config, int64_t n_experts);

  ExpertLinear c_fc;  // C -> 4C (or moe.ffn_hidden_size)
  GeluApproximate gelu;
  ExpertLinear c_proj;  // 4C -> C

  int64_t size() const { return c_fc.experts(); }
  /// Each expert's hidden width under `config`: moe.ffn_hidden_size, or 4C.
  static int64_t hidden(const GPTConfig& config);
  /// tokens [M, C] sorted by expert, counts[e] of them for expert e -> [M, C]: each row through
  /// its expert's MLP.
  Tensor forward(const Tensor& tokens, const std::vector<int64_t>& counts) const;
  void visit(Visitor& v) override;
};

}  // namespace tandem::nn
