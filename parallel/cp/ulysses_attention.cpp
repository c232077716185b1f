// parallel/cp/ulysses_attention.cpp — the two all-to-alls round one device's attention: from
// [B, H, T/cp, D] (every head, this rank's positions) to [B, H/cp, T, D] (this rank's heads,
// every position, in the sequence's order) and back.
#include <tandem/autograd/ops/nn_ops.h>
#include <tandem/autograd/ops/ops.h>
#include <tandem/autograd/record.h>
#include <tandem/core/check.h>
#include <tandem/core/generator.h>
#include <tandem/core/layout.h>
#include <tandem/core/tensor_checks.h>
#include <tandem/parallel/cp/ulysses_attention.h>

namespace tandem::parallel::cp {
namespace {

// The all-to-all as an op: chunk i of x's dim 0 goes to rank i, and chunk j of the result came
// from rank j. The exchange is its own transpose, so its backward is the same exchange of the
// gradient.
Tensor exchange(const Tensor& x, Communicator& group) {
  const Tensor in = ::tandem::detail::contiguous(x);
  Tensor y = empty(in.shape(), in.options());
  group.all_to_all(y, in)->wait();
  return record("all_to_all", y, {x}, {},
                [g = &group](const Tensor& dy, const NeedsGrad&, const Saved&) -> Grads {
                  const Tensor d = ::tandem::detail::contiguous(dy);
                  Tensor dx = empty(d.shape(), d.options());
                  g->all_to_all(dx, d)->wait();
                  return {dx};
                });
}

// [b, H, t, D] (this rank's positions) -> [b, H/cp, T, D] (this rank's heads, the whole sequence
// in order): head group i goes to rank i; rank j's positions arrive as chunk j.
Tensor to_heads(const Tensor& x, Communicator& g, SequenceSplit split) {
  const int64_t cp = g.size(), b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3);
  const Tensor sent = x.reshape({b, cp, h / cp, t, d}).permute({1, 0, 2, 3, 4});
  const Tensor got = exchange(sent, g);  // [cp (their rank), b, H/cp, t, D]
  std::vector<Tensor> parts;
  for (int64_t r = 0; r < cp; ++r) parts.push_back(got.select(0, r));
  return unshard_sequence(parts, 2, split);
}

// [b, H/cp, T, D] -> [b, H, t, D]: rank j's positions go to it; head group i arrives from rank i.
Tensor to_sequence(const Tensor& y, Communicator& g, SequenceSplit split) {
  const int64_t cp = g.size();
  std::vector<Tensor> parts;
  for (int64_t r = 0; r < cp; ++r) parts.push_back(shard_sequence(y, 2, r, cp, split));
  const Tensor got = exchange(stack(parts, 0), g);  // [cp (their heads), b, H/cp, t, Dv]
  const int64_t b = y.size(0), hc = y.size(1), t = y.size(2) / cp, dv = y.size(3);
  return got.permute({1, 0, 2, 3, 4}).reshape({b, cp * hc, t, dv});
}

}  // namespace

Tensor ulysses_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                         Communicator& group, const ContextAttentionOptions& options) {
  TD_CHECK_SHAPE(q_in.dim() >= 3 && k_in.shape() == q_in.shape() && v_in.dim() == q_in.dim(),
                 "ulysses_attention: q, k and v must be [..., H, T/cp, D] alike, not ",
                 q_in.shape(), ", ", k_in.shape(), ", ", v_in.shape());
  Shape lead = q_in.shape();
  lead.resize(lead.size() - 1);
  Shape v_lead = v_in.shape();
  v_lead.resize(v_lead.size() - 1);
  TD_CHECK_SHAPE(v_lead == lead, "ulysses_attention: v ", v_in.shape(),
                 " must hold q's heads and positions, ", q_in.shape());
  TD_CHECK_DTYPE(
      is_floating(q_in.dtype()) && k_in.dtype() == q_in.dtype() && v_in.dtype() == q_in.dtype(),
      "ulysses_attention: q, k and v must be one floating dtype, not ", q_in.dtype(), ", ",
      k_in.dtype(), ", ", v_in.dtype());
  check_same_device("ulysses_attention", {{"query", q_in}, {"key", k_in}, {"value", v_in}});
  const int64_t cp = group.size(), heads = q_in.size(-3), t = q_in.size(-2);
  TD_CHECK_SHAPE(heads % cp == 0, "ulysses_attention: ", heads, " heads do not divide among the ",
                 cp,
                 " ranks of the context-parallel group (each attends for H/cp of them); use ring "
                 "attention, or a group size that divides ",
                 heads);
  TD_CHECK_SHAPE(options.split == SequenceSplit::Contiguous || t % 2 == 0,
                 "ulysses_attention: ", "this rank's ", t,
                 " positions are not the zig-zag split's two equal chunks");
  int64_t b = 1;
  for (size_t i = 0; i + 3 < size_t(q_in.dim()); ++i) b *= q_in.size(int64_t(i));
  const auto heads_of = [&](const Tensor& x) {
    return to_heads(x.reshape({b, heads, t, x.size(-1)}), group, options.split);
  };
  TD_CHECK_VALUE(options.dropout_p >= 0 && options.dropout_p < 1,
                 "ulysses_attention: dropout_p must be in [0, 1), not ", options.dropout_p);
  const Tensor q = heads_of(q_in), k = heads_of(k_in), v = heads_of(v_in);
  const AttentionOptions attend{
      .causal = options.causal, .dropout_p = options.dropout_p, .scale = options.scale};
  Tensor y;
  if (options.dropout_p == 0) {
    y = scaled_dot_product_attention(q, k, v, attend);
  } else {
    // One device's draw for the whole [b, H, T, T] probabilities, of which this rank's heads
    // are H/cp consecutive ones in each row b: a run of counters per row, each drawn by the op
    // from a generator that starts there.
    const int64_t mine = heads / cp, whole = t * cp;
    const GeneratorState all =
        reserve_random(q_in.device(), uint64_t(b * heads) * uint64_t(whole * whole));
    std::vector<Tensor> rows;
    for (int64_t r = 0; r < b; ++r) {
      const uint64_t first =
          all.offset + uint64_t((r * heads + group.rank() * mine) * whole * whole);
      const ReplayGenerators run({{q_in.device(), {all.seed, first}}}, {}, /*noted=*/false);
      rows.push_back(
          scaled_dot_product_attention(q.select(0, r), k.select(0, r), v.select(0, r), attend));
    }
    y = stack(rows, 0);
  }
  Shape out = v_in.shape();
  return to_sequence(y, group, options.split).reshape(out);
}

}  // namespace tandem::parallel::cp
