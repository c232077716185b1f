// nn/experts.cpp — the stacked experts: each expert's rows through its own weights, one GEMM per
// expert (a loop of them: neither OpenBLAS 0.3.21 nor oneDNN has a grouped GEMM).
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/experts.h>
#include <tandem/nn/init.h>
#include <cmath>
#include <numeric>

namespace tandem::nn {

ExpertLinear::ExpertLinear(int64_t experts, int64_t in, int64_t out, LinearOptions o)
    : in_features(in), out_features(out) {
  TD_CHECK_VALUE(experts > 0 && in > 0 && out > 0,
                 "ExpertLinear: experts, in_features and out_features must be positive, got ",
                 experts, ", ", in, " and ", out);
  const double bound = 1.0 / std::sqrt(double(in));  // torch.nn.Linear's, expert by expert
  weight = empty({experts, out, in}, o.tensor);
  init::uniform_(weight, -bound, bound);
  weight.requires_grad_();
  if (o.bias) {
    bias = empty({experts, out}, o.tensor);
    init::uniform_(bias, -bound, bound);
    bias.requires_grad_();
  }
}

Tensor ExpertLinear::forward(const Tensor& x, const std::vector<int64_t>& counts) const {
  TD_CHECK_SHAPE(x.dim() == 2 && x.size(1) == in_features, "ExpertLinear: tokens must be [M, ",
                 in_features, "], not ", x.shape());
  TD_CHECK_VALUE(int64_t(counts.size()) == experts(), "ExpertLinear: ", counts.size(),
                 " counts for ", experts(), " experts");
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  TD_CHECK_SHAPE(rows == x.size(0), "ExpertLinear: the counts add up to ", rows, " rows, but ",
                 "the tokens are ", x.shape());
  std::vector<Tensor> parts;
  int64_t begin = 0;
  for (int64_t e = 0; e < experts(); ++e) {
    const int64_t n = counts[size_t(e)];
    if (n == 0) continue;
    parts.push_back(linear(x.narrow(0, begin, n), weight.select(0, e),
                           bias.defined() ? bias.select(0, e) : Tensor()));
    begin += n;
  }
  // No rows at all (an expert-parallel rank no token chose): an empty product still reaches the
  // weights and the bias, so that they get a gradient of zeros as they would on one device (and
  // every rank reduces the same gradients).
  if (parts.empty()) {
    const Tensor none = matmul(x, weight.select(0, 0).t());
    return bias.defined() ? none + bias.select(0, 0) : none;
  }
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

void ExpertLinear::visit(Visitor& v) {
  v("weight", weight);
  if (bias.defined()) v("bias", bias);
}

std::string ExpertLinear::extra_repr() const {
  return tandem::str("experts=", experts(), ", in_features=", in_features,
                     ", out_features=", out_features, ", bias=", bias.defined() ? "True" : "False");
}

Experts::Experts(const GPTConfig& c, int64_t n)
    : c_fc(n, c.n_embd, hidden(c), {.bias = c.bias, .tensor = c.tensor}),
      gelu(c.gelu),
      c_proj(n, hidden(c), c.n_embd, {.bias = c.bias, .tensor = c.tensor}) {}

int64_t Experts::hidden(const GPTConfig& c) {
  return c.moe.ffn_hidden_size > 0 ? c.moe.ffn_hidden_size : 4 * c.n_embd;
}

Tensor Experts::forward(const Tensor& tokens, const std::vector<int64_t>& counts) const {
  return c_proj.forward(tandem::gelu(c_fc.forward(tokens, counts), gelu), counts);
}

void Experts::visit(Visitor& v) {
  v("c_fc", c_fc);
  v("c_proj", c_proj);
}

}  // namespace tandem::nn
