// nn/moe_routing.cpp — top-k gates, capacity over the routing group, and the auxiliary losses.
#include <tandem/autograd/grad_mode.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/core/check.h>
#include <tandem/nn/moe_routing.h>
#include <algorithm>
#include <cmath>

namespace tandem::nn {

Gates gate(const Tensor& logits, const MoEOptions& o) {
  const int64_t k = o.top_k;
  Gates g;
  g.probs = softmax(logits, 1);
  Tensor chosen;
  if (o.gating == Gating::SoftmaxTopK) {
    auto [values, index] = topk(g.probs, k, 1);
    g.gates = values, chosen = index;
  } else {
    auto [values, index] = topk(logits, k, 1);
    g.gates = softmax(values, 1), chosen = index;
  }
  g.experts = chosen.to(Device::cpu()).contiguous().to_vector<int64_t>();
  return g;
}

Assignment assign(const std::vector<int64_t>& experts, int64_t n, const MoEOptions& o,
                  const ShareCounts& share) {
  const int64_t E = o.n_experts, k = o.top_k;
  TD_CHECK_VALUE(int64_t(experts.size()) == n * k, "MoE: ", experts.size(), " choices for ", n,
                 " tokens of ", k);
  // This rank's choices j of each expert e, then the group's.
  std::vector<int64_t> local(size_t(k * E), 0);
  for (int64_t c = 0; c < n * k; ++c) ++local[size_t((c % k) * E + experts[size_t(c)])];
  RoutingCounts group = share ? share(local) : RoutingCounts{local, 0};
  const int64_t R = int64_t(group.all.size()) / (k * E);
  TD_CHECK_VALUE(R > 0 && int64_t(group.all.size()) == R * k * E && group.rank < R,
                 "MoE: the routing group's counts are ", group.all.size(),
                 " numbers, not a "
                 "multiple of k·E = ",
                 k * E, " with rank ", group.rank, " among them");
  const auto at = [&](int64_t r, int64_t j, int64_t e) {
    return group.all[size_t((r * k + j) * E + e)];
  };

  Assignment a;
  a.routed.assign(size_t(E), 0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < k; ++j)
      for (int64_t e = 0; e < E; ++e) a.routed[size_t(e)] += at(r, j, e);
  for (int64_t e = 0; e < E; ++e) a.group_tokens += a.routed[size_t(e)];
  a.group_tokens /= k;
  if (o.capacity_factor)
    a.capacity =
        int64_t(std::ceil(*o.capacity_factor * double(a.group_tokens) * double(k) / double(E)));
  // Choice j of expert e from this rank is the group's `start` + its place among this rank's:
  // every rank's earlier choices first, then the earlier ranks' choices j.
  std::vector<std::vector<int64_t>> queue(
      static_cast<size_t>(E));  // this rank's kept choices, by expert
  for (int64_t j = 0; j < k; ++j) {
    std::vector<int64_t> place(size_t(E), 0);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t jj = 0; jj < j; ++jj)
        for (int64_t r = 0; r < R; ++r) place[size_t(e)] += at(r, jj, e);
      for (int64_t r = 0; r < group.rank; ++r) place[size_t(e)] += at(r, j, e);
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t c = t * k + j, e = experts[size_t(c)];
      if (a.capacity < 0 || place[size_t(e)]++ < a.capacity) queue[size_t(e)].push_back(c);
    }
  }
  if (a.capacity >= 0)
    for (int64_t e = 0; e < E; ++e)
      a.dropped += std::max<int64_t>(0, a.routed[size_t(e)] - a.capacity);
  a.slots.assign(size_t(n * k), -1);
  for (int64_t e = 0; e < E; ++e) {
    a.counts.push_back(int64_t(queue[size_t(e)].size()));
    for (int64_t c : queue[size_t(e)]) {
      a.slots[size_t(c)] = int64_t(a.tokens.size());
      a.tokens.push_back(c / k);
    }
  }
  for (int64_t& s : a.slots)
    if (s < 0) s = int64_t(a.tokens.size());  // the zero row past the experts' outputs
  return a;
}

Tensor aux_loss(const Tensor& logits, const Tensor& probs, const Assignment& a,
                const MoEOptions& o) {
  const int64_t E = o.n_experts;
  Tensor loss = zeros({}, logits.options());
  if (o.aux_loss_weight != 0) {
    std::vector<double> f;
    for (int64_t e = 0; e < E; ++e)
      f.push_back(double(a.routed[size_t(e)]) / double(a.group_tokens * o.top_k));
    const Tensor fraction = from_vector(f, {E}, logits.device()).to(logits.dtype());
    loss = loss + sum(mean(probs, {0}) * fraction) * (o.aux_loss_weight * double(E));
  }
  if (o.z_loss_weight != 0) {
    const Tensor m = amax(logits, {1}, true).detach();  // for a stable logsumexp
    const Tensor lse = log(sum(exp(logits - m), {1})) + m.reshape({m.size(0)});
    loss = loss + mean(lse * lse) * o.z_loss_weight;
  }
  return loss;
}

}  // namespace tandem::nn
