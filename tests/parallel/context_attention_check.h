// tests/parallel/context_attention_check.h — one device's attention beside a context-parallel
// rank's part of it: the whole drawn from a seed (every rank, thread or process, draws the same),
// and the rank's error against it, in output and in the q, k, v gradients under a loss Σ out·w.
// Shared by the thread, shared-memory, Gloo and MPI tests of ring and Ulysses attention.
#pragma once

#include <gtest/gtest.h>
#include <tandem/parallel/cp/ring_attention.h>
#include <tandem/parallel/cp/ulysses_attention.h>
#include <tandem/tandem.h>

#include <algorithm>

namespace tandem::testing {

// One device's attention over the whole sequence and its gradients under a loss Σ out·w.
struct WholeAttention {
  Tensor q, k, v, w, out, dq, dk, dv;
};

// With dropout, one device's numbers come from this generator state (each rank's device is set
// to it too).
inline constexpr GeneratorState kDropoutState{0xd50, 0};

inline WholeAttention whole_attention(int64_t length, bool causal, uint64_t seed, int64_t heads = 3,
                                      double dropout_p = 0) {
  manual_seed(seed);
  WholeAttention r;
  r.q = randn({2, heads, length, 8}, {.dtype = kFloat64}).requires_grad_(true);
  r.k = randn({2, heads, length, 8}, {.dtype = kFloat64}).requires_grad_(true);
  r.v = randn({2, heads, length, 6}, {.dtype = kFloat64}).requires_grad_(true);
  r.w = randn({2, heads, length, 6}, {.dtype = kFloat64});
  default_generator(Device::cpu()).set_state(kDropoutState);
  r.out = scaled_dot_product_attention(r.q, r.k, r.v, {.causal = causal, .dropout_p = dropout_p});
  (r.out * r.w).sum().backward();
  r.dq = r.q.grad(), r.dk = r.k.grad(), r.dv = r.v.grad();
  return r;
}

// The largest difference over the largest magnitude: a relative error of the whole tensor.
inline double relative(const Tensor& got, const Tensor& want) {
  return abs(got.to(want.device()) - want).max().item() / std::max(abs(want).max().item(), 1e-300);
}

// This rank's part of ring (or Ulysses) attention over `whole`'s tensors, on `device`, and its
// error against them.
inline double rank_error(const WholeAttention& w, parallel::Communicator& g,
                         parallel::cp::SequenceSplit split, bool causal, bool ulysses = false,
                         Device device = Device::cpu(), double dropout_p = 0) {
  using namespace parallel::cp;
  const int64_t cp = g.size(), r = g.rank();
  auto mine = [&](const Tensor& t) { return shard_sequence(t.detach(), 2, r, cp, split); };
  Tensor q = mine(w.q).to(device).requires_grad_(true),
         k = mine(w.k).to(device).requires_grad_(true),
         v = mine(w.v).to(device).requires_grad_(true);
  const ContextAttentionOptions o{.causal = causal, .split = split, .dropout_p = dropout_p};
  default_generator(device).set_state(kDropoutState);
  const Tensor out = ulysses ? ulysses_attention(q, k, v, g, o) : ring_attention(q, k, v, g, o);
  (out * mine(w.w).to(device)).sum().backward();
  return std::max({relative(out, mine(w.out)), relative(q.grad(), mine(w.dq)),
                   relative(k.grad(), mine(w.dk)), relative(v.grad(), mine(w.dv))});
}

/// Ring and Ulysses attention over the processes of `g` (any backend), causal, both splits: the
/// worst error of this rank's parts (a sequence of 4·cp positions, 2·cp heads).
inline double context_attention_error(parallel::Communicator& g) {
  using parallel::cp::SequenceSplit;
  const int64_t cp = g.size();
  double worst = 0;
  for (SequenceSplit split : {SequenceSplit::ZigZag, SequenceSplit::Contiguous})
    for (bool ulysses : {false, true}) {
      const WholeAttention w = whole_attention(4 * cp, true, uint64_t(40 + cp), 2 * cp);
      worst = std::max(worst, rank_error(w, g, split, true, ulysses));
    }
  return worst;
}

}  // namespace tandem::testing
